package disktier

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"path/filepath"

	"github.com/hoard-io/hoard/internal/store"
)

// The directory's layout: objects/<first two hex digits>/<hash> and tmp/
// for files being written.
const (
	objectsDir = "objects"
	tmpDir     = "tmp"
)

// A file: magic, the header's length and CRC32C (little-endian uint32s),
// the header (JSON), the object's bytes, and their CRC32C (little-endian
// uint32), recorded as they were written.
var magic = [8]byte{'H', 'O', 'A', 'R', 'D', 'D', 'T', '1'}

const (
	prefixLen   = len(magic) + 8
	trailerLen  = 4
	maxHeaderLn = 64 << 10
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// header is what a file says about its object.
type header struct {
	Bucket string           `json:"bucket"`
	Key    string           `json:"key"`
	Size   int64            `json:"size"`
	Info   store.ObjectInfo `json:"info"`
}

// nameOf is the file name of bucket/key: a hash, so that no key ever
// becomes a path.
func nameOf(bucket, key string) string {
	h := sha256.New()
	h.Write([]byte(bucket))
	h.Write([]byte{0})
	h.Write([]byte(key))
	return hex.EncodeToString(h.Sum(nil))
}

// validName reports whether a directory entry is one of the tier's files.
func validName(s string) bool {
	if len(s) != 2*sha256.Size {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}

func (t *Tier) path(name string) string {
	return filepath.Join(t.cfg.Dir, objectsDir, name[:2], name)
}

// encodeHeader returns a file's prefix and header.
func encodeHeader(h header) ([]byte, error) {
	js, err := json.Marshal(h)
	if err != nil {
		return nil, err
	}
	if len(js) > maxHeaderLn {
		return nil, fmt.Errorf("header of %d bytes is too large", len(js))
	}
	b := make([]byte, prefixLen, prefixLen+len(js))
	copy(b, magic[:])
	binary.LittleEndian.PutUint32(b[8:], uint32(len(js)))
	binary.LittleEndian.PutUint32(b[12:], crc32.Checksum(js, castagnoli))
	return append(b, js...), nil
}

// decodePrefix checks a file's prefix and returns its header's length and
// CRC32C.
func decodePrefix(p []byte) (n int, sum uint32, ok bool) {
	if len(p) < prefixLen || [8]byte(p[:8]) != magic {
		return 0, 0, false
	}
	n = int(binary.LittleEndian.Uint32(p[8:]))
	if n <= 0 || n > maxHeaderLn {
		return 0, 0, false
	}
	return n, binary.LittleEndian.Uint32(p[12:]), true
}
