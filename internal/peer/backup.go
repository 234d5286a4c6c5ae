package peer

import (
	"bytes"
	"context"
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
	default:
		a.error(ErrBadRequest)
	}
}
