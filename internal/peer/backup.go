package peer

import (
	"bytes"
	"context"
	"crypto/md5"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net/http"
	"strconv"

	"github.com/hoard-io/hoard/internal/store"
)

// Backups of durable writes (`durable_writes: replicated`, ADR 0030): the
// owner of a key sends each write it logs to a second member, which logs
// it too (a backup record) before it answers; the write is acknowledged
// once both hold it. Once the owner's writes are in the store it tells
// the backup which records it may drop (done marks, in batches).
//
// The record's metadata (owner, sequence, bucket, key, options, the
// version it makes and those it may replace) and the body's CRC32C travel
// in one header that the request's signature covers; the body streams
// with a CRC32C trailer that must match both. A done batch's body (the
// sequence numbers) is covered by its SHA-256 in the signed header.

// Paths of the backup requests.
const (
	backupPath     = "/v1/backup"
	backupDonePath = "/v1/backup/done"
	backupFindPath = "/v1/backup/find"
)

// Bounds of backup requests.
const (
	// MaxBackupHeader bounds the backup header (the record's metadata).
	MaxBackupHeader = 32 << 10
	// MaxBackupBytes bounds one record's body.
	MaxBackupBytes = 1 << 30
	// MaxBackupDone bounds the sequence numbers of one done batch.
	MaxBackupDone = 1 << 16
)

// BackupRecord describes one write sent to a backup.
type BackupRecord struct {
	// Owner is the member ID of the cachelet that holds the write as the
	// key's owner; Incarnation its process's (ordered: a later process
	// with the same ID has a larger one); Seq the write's number in it.
	Owner       string `json:"owner"`
	Incarnation uint64 `json:"inc"`
	Seq         uint64 `json:"seq"`
	Bucket      string `json:"bucket"`
	Key         string `json:"key"`
	// Opts are the write's options as the store will get them.
	Opts store.PutOptions `json:"opts"`
	// ETag is the version the write makes (the body's MD5, hex).
	ETag string `json:"etag"`
	// Replaces are the store versions the write may replace (its base;
	// nil: unknown).
	Replaces []string `json:"replaces,omitempty"`
	// Size and CRC32C are the body's.
	Size   int64  `json:"size"`
	CRC32C uint32 `json:"crc32c"`
}

// backupDone is the done header's content.
type backupDone struct {
	Owner       string `json:"owner"`
	Incarnation uint64 `json:"inc"`
	SHA256      string `json:"sha256"`
}

// backupFind is the find request's header content.
type backupFind struct {
	Bucket string `json:"bucket"`
	Key    string `json:"key"`
}

// BackupKeeper is implemented by Owners that keep backups of their peers'
// durable writes (the cachelet does, under `durable_writes: replicated`).
// Called concurrently.
type BackupKeeper interface {
	// PeerBackup keeps the write rec describes: body holds exactly
	// rec.Size bytes, checked against the signed CRC32C and the trailer
	// as it is read (a body that fails returns an error from a Read
	// before its last bytes, and nothing may be kept). It returns once
	// the record is durable (fsynced), or an error: store.ErrUnavailable
	// when there is no room or the log failed, ErrBadRequest for a
	// record it refuses.
	PeerBackup(ctx context.Context, rec BackupRecord, body io.Reader) error
	// PeerBackupDone drops the records of owner's incarnation inc with
	// the given sequence numbers: the owner has them in the store (or no
	// longer needs them). Unknown ones are ignored.
	PeerBackupDone(ctx context.Context, owner string, inc uint64, seqs []uint64)
}

// BackupFinder is implemented by BackupKeepers that answer readers of a
// key whose owner they cannot reach (the cachelet does): is a write of
// the key, acknowledged and not yet known to be in the store, kept here?
type BackupFinder interface {
	// PeerBackupFind returns the newest backup record of bucket/key this
	// cachelet keeps (not yet done, or being delivered for an owner that
	// is gone) and its bytes, or nil when it keeps none. An error means
	// it cannot tell.
	PeerBackupFind(ctx context.Context, bucket, key string) (*BackupRecord, []byte, error)
}

// BackupFind asks the cachelet at addr for the newest backup record of
// bucket/key it keeps: nil when it keeps none. The answer is signed as
// every answer is; the record's bytes (at most maxBytes, and
// MaxBackupBytes) are checked against its signed CRC32C and against the
// version it makes (their MD5) before BackupFind returns them. Errors:
// store.ErrUnavailable when the peer cannot be reached or its answer
// does not verify.
func (c *Client) BackupFind(ctx context.Context, addr, bucket, key string, maxBytes int64) (*BackupRecord, []byte, error) {
	if bucket == "" || key == "" {
		return nil, nil, fmt.Errorf("%w: a backup lookup names its bucket and key", ErrBadRequest)
	}
	hdr, err := encodeHeader(backupFind{Bucket: bucket, Key: key})
	if err != nil {
		return nil, nil, err
	}
	if len(hdr) > MaxBackupHeader {
		return nil, nil, fmt.Errorf("%w: key too long", ErrBadRequest)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.scheme+addr+backupFindPath, nil)
	if err != nil {
		return nil, nil, err
	}
	req.Header.Set(hdrBackup, hdr)
	resp, err := c.do(c.get, req, addr)
	if err != nil {
		return nil, nil, err
	}
	switch resp.StatusCode {
	case http.StatusNoContent:
		resp.Body.Close()
		return nil, nil, nil
	case http.StatusOK:
	default:
		defer resp.Body.Close()
		return nil, nil, readError(resp)
	}
	var rec BackupRecord
	bad := func(why string) (*BackupRecord, []byte, error) {
		resp.Body.Close()
		return nil, nil, fmt.Errorf("%w: peer %s: backup record %s", store.ErrUnavailable, addr, why)
	}
	if decodeHeader(resp.Header.Get(hdrBackup), &rec) != nil {
		return bad("without its metadata")
	}
	if rec.Bucket != bucket || rec.Key != key || rec.ETag == "" || rec.Size < 0 || rec.Size > min(maxBytes, MaxBackupBytes) {
		return bad("of another key, without a version, or past the bound")
	}
	body, err := c.streamed(resp, addr, rec.Size, "backup record")
	if err != nil {
		return nil, nil, err
	}
	defer body.Close()
	data, _, err := readAllSized(body, rec.Size)
	if err != nil {
		return nil, nil, err
	}
	sum := md5.Sum(data)
	if crc32.Checksum(data, castagnoli) != rec.CRC32C || hex.EncodeToString(sum[:]) != rec.ETag {
		return nil, nil, fmt.Errorf("%w: peer %s: backup record's bytes do not make its version", store.ErrUnavailable, addr)
	}
	return &rec, data, nil
}

// readAllSized reads r, which verifies itself, to its end: exactly size
// bytes.
func readAllSized(r io.Reader, size int64) ([]byte, int64, error) {
	data := make([]byte, size)
	n, err := io.ReadFull(r, data)
	if err != nil {
		return nil, int64(n), err
	}
	if _, err := r.Read(nil); !errors.Is(err, io.EOF) {
		if err == nil {
			err = fmt.Errorf("%w: backup record longer than announced", store.ErrUnavailable)
		}
		return nil, int64(n), err
	}
	return data, int64(n), nil
}

// Backup sends the write rec describes, whose body is data, to the
// cachelet at addr, and returns once that cachelet holds it durably.
// rec's Size and CRC32C are set here.
func (c *Client) Backup(ctx context.Context, addr string, rec BackupRecord, data []byte) error {
	if rec.Owner == "" || rec.Bucket == "" || rec.Key == "" {
		return fmt.Errorf("%w: a backup names its owner, bucket and key", ErrBadRequest)
	}
	rec.Size, rec.CRC32C = int64(len(data)), crc32.Checksum(data, castagnoli)
	hdr, err := encodeHeader(rec)
	if err != nil {
		return err
	}
	if len(hdr) > MaxBackupHeader {
		return fmt.Errorf("%w: backup metadata too large", ErrBadRequest)
	}
	return c.putStreamed(ctx, addr, backupPath, bytes.NewReader(data), rec.Size, hdrBackup, hdr)
}

// BackupDone tells the cachelet at addr that the records of owner's
// incarnation inc with sequence numbers seqs may go (at most
// MaxBackupDone).
func (c *Client) BackupDone(ctx context.Context, addr, owner string, inc uint64, seqs []uint64) error {
	if owner == "" || len(seqs) == 0 || len(seqs) > MaxBackupDone {
		return fmt.Errorf("%w: a done batch names its owner and 1 to %d records", ErrBadRequest, MaxBackupDone)
	}
	body, err := json.Marshal(seqs)
	if err != nil {
		return err
	}
	sum := sha256.Sum256(body)
	hdr, err := encodeHeader(backupDone{Owner: owner, Incarnation: inc, SHA256: hex.EncodeToString(sum[:])})
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.scheme+addr+backupDonePath, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set(hdrBackup, hdr)
	resp, err := c.do(c.http, req, addr)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		return readError(resp)
	}
	return nil
}

func encodeHeader(v any) (string, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(data), nil
}

func decodeHeader(raw string, v any) error {
	if raw == "" || len(raw) > MaxBackupHeader {
		return errors.New("missing or oversized header")
	}
	data, err := base64.RawURLEncoding.DecodeString(raw)
	if err != nil {
		return err
	}
	return json.Unmarshal(data, v)
}

// serveBackup answers the two backup requests.
func (s *Server) serveBackup(a answer, r *http.Request) {
	k, ok := s.owner.(BackupKeeper)
	if !ok {
		a.error(fmt.Errorf("%w: this cachelet keeps no backups of durable writes", ErrBadRequest))
		return
	}
	switch {
	case r.URL.Path == backupPath && r.Method == http.MethodPut:
		var rec BackupRecord
		size, err := strconv.ParseInt(r.Header.Get(hdrSize), 10, 64)
		if err != nil || decodeHeader(r.Header.Get(hdrBackup), &rec) != nil ||
			rec.Owner == "" || rec.Bucket == "" || rec.Key == "" || rec.ETag == "" ||
			rec.Size != size || size < 0 || size > MaxBackupBytes {
			a.error(fmt.Errorf("%w: a backup names its owner, bucket, key, version and size (at most %d bytes)", ErrBadRequest, MaxBackupBytes))
			return
		}
		body := &trailerChecked{r: r.Body, req: r, remaining: size, crc: crc32.New(castagnoli), signed: &rec.CRC32C}
		if err := k.PeerBackup(r.Context(), rec, body); err != nil {
			if body.err != nil {
				err = body.err
			}
			s.log.Debug("backup refused", "owner", rec.Owner, "bucket", rec.Bucket, "key", rec.Key, "err", err)
			a.error(err)
			return
		}
		a.whole(http.StatusNoContent, nil)
	case r.URL.Path == backupDonePath && r.Method == http.MethodPost:
		var d backupDone
		if err := decodeHeader(r.Header.Get(hdrBackup), &d); err != nil || d.Owner == "" {
			a.error(fmt.Errorf("%w: a done batch names its owner", ErrBadRequest))
			return
		}
		body, err := io.ReadAll(io.LimitReader(r.Body, 24*MaxBackupDone))
		sum := sha256.Sum256(body)
		var seqs []uint64
		if err != nil || hex.EncodeToString(sum[:]) != d.SHA256 || json.Unmarshal(body, &seqs) != nil || len(seqs) > MaxBackupDone {
			a.error(fmt.Errorf("%w: a done batch's body does not match its signed digest", ErrBadRequest))
			return
		}
		k.PeerBackupDone(r.Context(), d.Owner, d.Incarnation, seqs)
		a.whole(http.StatusNoContent, nil)
	case r.URL.Path == backupFindPath && r.Method == http.MethodGet:
		s.serveBackupFind(a, r)
	default:
		a.error(ErrBadRequest)
	}
}

// serveBackupFind answers a reader's lookup of a key's backup record:
// 204 for none, else the record's metadata in the signed header and its
// bytes streamed with the answer's MAC.
func (s *Server) serveBackupFind(a answer, r *http.Request) {
	f, ok := s.owner.(BackupFinder)
	if !ok {
		a.error(fmt.Errorf("%w: this cachelet keeps no backups of durable writes", ErrBadRequest))
		return
	}
	var q backupFind
	if err := decodeHeader(r.Header.Get(hdrBackup), &q); err != nil || q.Bucket == "" || q.Key == "" {
		a.error(fmt.Errorf("%w: a backup lookup names its bucket and key", ErrBadRequest))
		return
	}
	rec, data, err := f.PeerBackupFind(r.Context(), q.Bucket, q.Key)
	if err != nil {
		a.error(err)
		return
	}
	if rec == nil {
		a.whole(http.StatusNoContent, nil)
		return
	}
	out := *rec
	out.Size, out.CRC32C = int64(len(data)), crc32.Checksum(data, castagnoli)
	hdr, err := encodeHeader(out)
	if err != nil || len(hdr) > MaxBackupHeader {
		a.error(fmt.Errorf("%w: backup metadata too large", store.ErrUnavailable))
		return
	}
	a.w.Header().Set(hdrBackup, hdr)
	sw := a.stream(out.Size)
	if _, err := sw.Write(data); err == nil {
		_, err = sw.finish()
		if err == nil {
			return
		}
	}
	// Headers are out: a short body is the signal, never wrong bytes.
	panic(http.ErrAbortHandler)
}
