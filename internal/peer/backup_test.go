package peer

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"hash/crc32"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/hoard-io/hoard/internal/store"
)

// fakeKeeper is a fakeOwner that keeps backup records whose body reads to
// its end without an error.
type fakeKeeper struct {
	*fakeOwner
	kmu     sync.Mutex
	records map[uint64]BackupRecord
	bodies  map[uint64][]byte
	done    []uint64
	tamper  bool // PeerBackupFind answers other bytes
}

func (f *fakeKeeper) PeerBackup(_ context.Context, rec BackupRecord, body io.Reader) error {
	data, err := io.ReadAll(body)
	if err != nil {
		return err // nothing kept
	}
	f.kmu.Lock()
	defer f.kmu.Unlock()
	f.records[rec.Seq], f.bodies[rec.Seq] = rec, data
	return nil
}

func (f *fakeKeeper) PeerBackupDone(_ context.Context, owner string, inc uint64, seqs []uint64) {
	f.kmu.Lock()
	defer f.kmu.Unlock()
	f.done = append(f.done, seqs...)
}

func (f *fakeKeeper) kept() int {
	f.kmu.Lock()
	defer f.kmu.Unlock()
	return len(f.records)
}

func newBackupPair(t *testing.T) (*Client, *fakeKeeper, string, *Auth) {
	t.Helper()
	auth, err := NewAuth("app1", []byte(secret), nil)
	if err != nil {
		t.Fatal(err)
	}
	k := &fakeKeeper{fakeOwner: newFakeOwner(), records: map[uint64]BackupRecord{}, bodies: map[uint64][]byte{}}
	srv := httptest.NewServer(NewServer(auth, k, nil))
	t.Cleanup(srv.Close)
	cl := NewClient(auth, ClientConfig{})
	t.Cleanup(cl.Close)
	return cl, k, strings.TrimPrefix(srv.URL, "http://"), auth
}

func backupRec(seq uint64) BackupRecord {
	return BackupRecord{Owner: "app1-0", Incarnation: 5, Seq: seq, Bucket: "bk", Key: "dir/a b",
		Opts: store.PutOptions{ContentType: "text/plain", UserMetadata: map[string]string{"k": "v"}}, ETag: "e" + strconv.FormatUint(seq, 10), Replaces: []string{"", "x"}}
}

func TestBackupRoundTrip(t *testing.T) {
	cl, k, addr, _ := newBackupPair(t)
	data := randomBytes(200 << 10)
	if err := cl.Backup(context.Background(), addr, backupRec(1), data); err != nil {
		t.Fatalf("Backup: %v", err)
	}
	got, body := k.records[1], k.bodies[1]
	if !bytes.Equal(body, data) || got.Owner != "app1-0" || got.Incarnation != 5 || got.Key != "dir/a b" ||
		got.ETag != "e1" || len(got.Replaces) != 2 || got.Opts.UserMetadata["k"] != "v" || got.Size != int64(len(data)) ||
		got.CRC32C != crc32.Checksum(data, castagnoli) {
		t.Fatalf("kept %d bytes as %+v", len(body), got)
	}
	if err := cl.BackupDone(context.Background(), addr, "app1-0", 5, []uint64{1, 2}); err != nil {
		t.Fatalf("BackupDone: %v", err)
	}
	if len(k.done) != 2 || k.done[0] != 1 || k.done[1] != 2 {
		t.Fatalf("done marks %v", k.done)
	}
}

// An attacker without the application's key, or with the key of another
// application, cannot have a backup kept or records dropped; a record
// whose body does not match its signed CRC32C, or whose metadata was
// changed after signing, is refused too. Nothing is kept.
func TestBackupRefusesForgeries(t *testing.T) {
	_, k, addr, auth := newBackupPair(t)
	data := []byte("forged bytes")
	status := func(req *http.Request) int {
		t.Helper()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	build := func(rec BackupRecord, body []byte) *http.Request {
		rec.Size, rec.CRC32C = int64(len(body)), crc32.Checksum(body, castagnoli)
		hdr, _ := encodeHeader(rec)
		req, _ := http.NewRequest(http.MethodPut, "http://"+addr+backupPath, bytes.NewReader(body))
		req.Header.Set(hdrSize, strconv.Itoa(len(body)))
		req.Header.Set(hdrBackup, hdr)
		return req
	}
	// Unsigned.
	if s := status(build(backupRec(1), data)); s != http.StatusForbidden {
		t.Fatalf("unsigned backup answered %d, want 403", s)
	}
	// Signed with another secret, and with another application's key.
	for _, a := range []struct{ app, secret string }{{"app1", "another-secret-of-16-bytes"}, {"app2", secret}} {
		other, err := NewAuth(a.app, []byte(a.secret), nil)
		if err != nil {
			t.Fatal(err)
		}
		oc := NewClient(other, ClientConfig{})
		if err := oc.Backup(context.Background(), addr, backupRec(2), data); err == nil {
			t.Fatalf("backup signed as %s with a foreign key was kept", a.app)
		}
		if err := oc.BackupDone(context.Background(), addr, "app1-0", 5, []uint64{9}); err == nil {
			t.Fatalf("done batch signed as %s with a foreign key was taken", a.app)
		}
		oc.Close()
	}
	// Metadata changed after signing: another key, another version.
	req := build(backupRec(3), data)
	auth.Sign(req)
	forged := backupRec(3)
	forged.Key = "other"
	forged.Size, forged.CRC32C = int64(len(data)), crc32.Checksum(data, castagnoli)
	hdr, _ := encodeHeader(forged)
	req.Header.Set(hdrBackup, hdr)
	if s := status(req); s != http.StatusForbidden {
		t.Fatalf("backup changed after signing answered %d, want 403", s)
	}
	// Signed, but the body is not the one whose CRC32C was signed (its
	// trailer matches it: the trailer is not keyed).
	cl := NewClient(auth, ClientConfig{})
	defer cl.Close()
	rec := backupRec(4)
	rec.Size, rec.CRC32C = int64(len(data)), crc32.Checksum(data, castagnoli)
	hdr, _ = encodeHeader(rec)
	other := append([]byte(nil), data...)
	other[3] ^= 1
	err := cl.putStreamed(context.Background(), addr, backupPath, bytes.NewReader(other), int64(len(other)), hdrBackup, hdr)
	if !errors.Is(err, ErrBadRequest) {
		t.Fatalf("backup with bytes other than signed: %v, want ErrBadRequest", err)
	}
	if n := k.kept(); n != 0 {
		t.Fatalf("%d forged records kept", n)
	}
	// A done batch whose body was changed after signing.
	body := []byte("[1]")
	sum := sha256.Sum256(body)
	dh, _ := encodeHeader(backupDone{Owner: "app1-0", Incarnation: 5, SHA256: hex.EncodeToString(sum[:])})
	dreq, _ := http.NewRequest(http.MethodPost, "http://"+addr+backupDonePath, bytes.NewReader([]byte("[2]")))
	dreq.Header.Set(hdrBackup, dh)
	auth.Sign(dreq)
	if s := status(dreq); s != http.StatusBadRequest {
		t.Fatalf("done batch with a changed body answered %d, want 400", s)
	}
	if len(k.done) != 0 {
		t.Fatalf("forged done marks taken: %v", k.done)
	}
}

// A peer that keeps no backups answers one as a bad request.
func TestBackupToAnOwnerThatKeepsNone(t *testing.T) {
	cl, _, addr := newPair(t)
	if err := cl.Backup(context.Background(), addr, backupRec(1), []byte("x")); !errors.Is(err, ErrBadRequest) {
		t.Fatalf("Backup to a plain Owner: %v, want ErrBadRequest", err)
	}
}
