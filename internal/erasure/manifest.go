package erasure

import (
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"hash/crc32"
)

// Manifest describes one version of a sharded object: its layout and the
// checksum of every piece. Every shard of the object carries the same
// manifest.
type Manifest struct {
	// ETag is the store's version of the object the shards hold.
	ETag string
	// Size is the object's length in bytes.
	Size int64
	// Data and Parity are k and r.
	Data, Parity int
	// Chunk is the bytes of one piece (one shard's part of one stripe).
	Chunk int
	// Sums[i][s] is the CRC32C of piece s of shard i.
	Sums [][]uint32
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Checksum is the CRC32C the manifest records for a piece.
func Checksum(piece []byte) uint32 { return crc32.Checksum(piece, castagnoli) }

// NewManifest returns the manifest of an object of size bytes under c,
// with its checksums still to be filled (Encoder does).
func NewManifest(c Config, etag string, size int64) *Manifest {
	m := &Manifest{ETag: etag, Size: size, Data: c.DataShards, Parity: c.ParityShards, Chunk: c.ChunkFor(size)}
	n := m.Stripes()
	m.Sums = make([][]uint32, m.Shards())
	for i := range m.Sums {
		m.Sums[i] = make([]uint32, n)
	}
	return m
}

// Shards is k+r.
func (m *Manifest) Shards() int { return m.Data + m.Parity }

// StripeSize is the bytes of the object in one stripe.
func (m *Manifest) StripeSize() int64 { return int64(m.Data) * int64(m.Chunk) }

// Stripes is the number of stripes.
func (m *Manifest) Stripes() int {
	if m.Size == 0 {
		return 0
	}
	return int((m.Size + m.StripeSize() - 1) / m.StripeSize())
}

// ShardSize is the bytes of one whole shard.
func (m *Manifest) ShardSize() int64 { return int64(m.Stripes()) * int64(m.Chunk) }

// Covering returns the stripes [first, end) that hold bytes [off, off+n)
// of the object; n > 0 and the range within the object.
func (m *Manifest) Covering(off, n int64) (first, end int) {
	ss := m.StripeSize()
	return int(off / ss), int((off+n-1)/ss) + 1
}

// Verify checks pieces first, first+1, ... of shard i, given one after
// the other in b (a whole number of pieces). ErrCorrupt names the first
// that fails.
func (m *Manifest) Verify(i, first int, b []byte) error {
	if i < 0 || i >= m.Shards() || len(b)%m.Chunk != 0 || first < 0 || first+len(b)/m.Chunk > m.Stripes() {
		return fmt.Errorf("%w: %d bytes from stripe %d of shard %d", ErrBadManifest, len(b), first, i)
	}
	for s := 0; len(b) > 0; s++ {
		if Checksum(b[:m.Chunk]) != m.Sums[i][first+s] {
			return fmt.Errorf("%w: shard %d stripe %d", ErrCorrupt, i, first+s)
		}
		b = b[m.Chunk:]
	}
	return nil
}

// manifestVersion is the first byte of an encoded manifest.
const manifestVersion = 1

// Encode returns the manifest as one printable token (base64url of a
// binary form), as it travels in a header. Equal manifests encode equally.
func (m *Manifest) Encode() string {
	b := make([]byte, 0, 20+len(m.ETag)+4*m.Shards()*m.Stripes())
	b = append(b, manifestVersion, byte(m.Data), byte(m.Parity))
	b = binary.BigEndian.AppendUint64(b, uint64(m.Size))
	b = binary.BigEndian.AppendUint32(b, uint32(m.Chunk))
	b = binary.BigEndian.AppendUint16(b, uint16(len(m.ETag)))
	b = append(b, m.ETag...)
	for _, sums := range m.Sums {
		for _, s := range sums {
			b = binary.BigEndian.AppendUint32(b, s)
		}
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

// MaxEncoded bounds an encoded manifest (a header's value): 4 GiB in
// 64 KiB chunks of 64 shards would not fit, the defaults' 4 GiB in 1 MiB
// chunks takes ~26 KB.
const MaxEncoded = 512 << 10

// ParseManifest decodes Encode's form. Errors wrap ErrBadManifest.
func ParseManifest(s string) (*Manifest, error) {
	if len(s) > MaxEncoded {
		return nil, fmt.Errorf("%w: %d bytes", ErrBadManifest, len(s))
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) < 17 || b[0] != manifestVersion {
		return nil, fmt.Errorf("%w: not a manifest", ErrBadManifest)
	}
	m := &Manifest{Data: int(b[1]), Parity: int(b[2])}
	size := binary.BigEndian.Uint64(b[3:])
	m.Chunk = int(binary.BigEndian.Uint32(b[11:]))
	el := int(binary.BigEndian.Uint16(b[15:]))
	b = b[17:]
	if m.Data < 1 || m.Parity < 0 || m.Shards() > MaxShards || m.Chunk < 64 || m.Chunk%64 != 0 ||
		m.Chunk > 64<<20 || size > 1<<50 || len(b) < el {
		return nil, fmt.Errorf("%w: bad layout", ErrBadManifest)
	}
	m.Size = int64(size)
	m.ETag, b = string(b[:el]), b[el:]
	n := m.Stripes()
	if len(b) != 4*n*m.Shards() {
		return nil, fmt.Errorf("%w: %d checksum bytes for %d pieces", ErrBadManifest, len(b), n*m.Shards())
	}
	m.Sums = make([][]uint32, m.Shards())
	for i := range m.Sums {
		m.Sums[i] = make([]uint32, n)
		for s := range n {
			m.Sums[i][s] = binary.BigEndian.Uint32(b)
			b = b[4:]
		}
	}
	return m, nil
}
