package peer

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"testing"

	"github.com/hoard-io/hoard/internal/store"
)

// PeerBackupFind answers the newest record of the key kept (by sequence
// number), with the bytes kept unless tamper is set (then one is flipped).
func (f *fakeKeeper) PeerBackupFind(_ context.Context, bucket, key string) (*BackupRecord, []byte, error) {
	f.kmu.Lock()
	defer f.kmu.Unlock()
	var best *BackupRecord
	var data []byte
	for seq, r := range f.records {
		if r.Bucket == bucket && r.Key == key && (best == nil || seq > best.Seq) {
			r := r
			best, data = &r, f.bodies[seq]
		}
	}
	if best != nil && f.tamper {
		data = append([]byte(nil), data...)
		data[0] ^= 1
	}
	return best, data, nil
}

// realRec is backupRec(seq) whose version is data's MD5.
func realRec(seq uint64, data []byte) BackupRecord {
	r := backupRec(seq)
	sum := md5.Sum(data)
	r.ETag = hex.EncodeToString(sum[:])
	return r
}

// A reader finds the newest record kept of a key, its bytes checked
// against its CRC32C and version; none kept: nil.
func TestBackupFindRoundTrip(t *testing.T) {
	cl, _, addr, _ := newBackupPair(t)
	ctx := context.Background()
	if rec, data, err := cl.BackupFind(ctx, addr, "bk", "dir/a b", 1<<20); err != nil || rec != nil || data != nil {
		t.Fatalf("find with none kept: %v %d bytes %v", rec, len(data), err)
	}
	v1, v2 := randomBytes(3000), randomBytes(70<<10)
	for i, d := range [][]byte{v1, v2} {
		if err := cl.Backup(ctx, addr, realRec(uint64(i+1), d), d); err != nil {
			t.Fatal(err)
		}
	}
	rec, data, err := cl.BackupFind(ctx, addr, "bk", "dir/a b", 1<<20)
	if err != nil || rec == nil {
		t.Fatalf("find: %v %v", rec, err)
	}
	if !bytes.Equal(data, v2) || rec.Seq != 2 || rec.Owner != "app1-0" || rec.Incarnation != 5 || len(rec.Replaces) != 2 ||
		rec.Opts.ContentType != "text/plain" || rec.Size != int64(len(v2)) {
		t.Fatalf("found %+v with %d bytes, want the second record", rec, len(data))
	}
	if rec, _, err := cl.BackupFind(ctx, addr, "bk", "other", 1<<20); err != nil || rec != nil {
		t.Fatalf("find of another key: %v %v", rec, err)
	}
	// Past the reader's bound: refused, never read whole.
	if _, _, err := cl.BackupFind(ctx, addr, "bk", "dir/a b", 1000); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("find past the bound: %v, want unavailable", err)
	}
}

// Nobody outside the application reads a backup record: a lookup
// unsigned, signed with another secret or as another application, or
// changed after signing, is refused without the record's bytes. A record
// whose bytes do not make its version is refused by the reader.
func TestBackupFindRefusesForgeries(t *testing.T) {
	cl, k, addr, auth := newBackupPair(t)
	ctx := context.Background()
	secretBytes := []byte("the-kept-bytes-nobody-else-reads")
	if err := cl.Backup(ctx, addr, realRec(1, secretBytes), secretBytes); err != nil {
		t.Fatal(err)
	}
	get := func(req *http.Request) (int, []byte) {
		t.Helper()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	build := func(key string) *http.Request {
		hdr, _ := encodeHeader(backupFind{Bucket: "bk", Key: key})
		req, _ := http.NewRequest(http.MethodGet, "http://"+addr+backupFindPath, nil)
		req.Header.Set(hdrBackup, hdr)
		return req
	}
	if s, b := get(build("dir/a b")); s != http.StatusForbidden || bytes.Contains(b, secretBytes) {
		t.Fatalf("unsigned lookup answered %d (%d bytes), want 403 without the record", s, len(b))
	}
	for _, a := range []struct{ app, secret string }{{"app1", "another-secret-of-16-bytes"}, {"app2", secret}} {
		other, err := NewAuth(a.app, []byte(a.secret), nil)
		if err != nil {
			t.Fatal(err)
		}
		oc := NewClient(other, ClientConfig{})
		if rec, data, err := oc.BackupFind(ctx, addr, "bk", "dir/a b", 1<<20); err == nil || rec != nil || data != nil {
			t.Fatalf("lookup signed as %s with a foreign key answered %v, %d bytes, %v", a.app, rec, len(data), err)
		}
		oc.Close()
	}
	// Signed for another key, then changed to this one.
	req := build("other")
	auth.Sign(req)
	hdr, _ := encodeHeader(backupFind{Bucket: "bk", Key: "dir/a b"})
	req.Header.Set(hdrBackup, hdr)
	if s, b := get(req); s != http.StatusForbidden || bytes.Contains(b, secretBytes) {
		t.Fatalf("lookup changed after signing answered %d, want 403", s)
	}
	// A member whose bytes do not make the version it names.
	k.tamper = true
	if rec, _, err := cl.BackupFind(ctx, addr, "bk", "dir/a b", 1<<20); !errors.Is(err, store.ErrUnavailable) || rec != nil {
		t.Fatalf("record whose bytes do not make its version: %v %v, want unavailable", rec, err)
	}
}

// A peer that keeps no backups answers a lookup as a bad request.
func TestBackupFindAtAnOwnerThatKeepsNone(t *testing.T) {
	cl, _, addr := newPair(t)
	if _, _, err := cl.BackupFind(context.Background(), addr, "bk", "k", 1<<20); !errors.Is(err, ErrBadRequest) {
		t.Fatalf("BackupFind at a plain Owner: %v, want ErrBadRequest", err)
	}
}
