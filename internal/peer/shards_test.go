package peer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/hoard-io/hoard/internal/erasure"
	"github.com/hoard-io/hoard/internal/store"
)

// shardOwner is a fakeOwner holding shards in a real erasure.Store, as the
// cachelet does.
type shardOwner struct {
	*fakeOwner
	shards *erasure.Store
}

func (o shardOwner) PeerShardPut(_ context.Context, bucket, key, etag string, index int, manifest string, body io.Reader, size int64) error {
	err := o.shards.Receive(erasure.ShardKey{Bucket: bucket, Key: key, ETag: etag, Index: index}, manifest, body, size)
	if errors.Is(err, erasure.ErrCorrupt) || errors.Is(err, erasure.ErrBadManifest) {
		return fmt.Errorf("%w: %v", ErrBadRequest, err)
	}
	return err
}

func (o shardOwner) PeerShard(_ context.Context, bucket, key, etag string, first, end int) (int, string, []byte, error) {
	i, m, b, err := o.shards.Pieces(bucket, key, etag, first, end)
	switch {
	case errors.Is(err, erasure.ErrNotHeld):
		err = store.ErrNoSuchKey
	case errors.Is(err, erasure.ErrBadManifest):
		err = fmt.Errorf("%w: %v", ErrBadRequest, err)
	}
	return i, m, b, err
}

func (o shardOwner) PeerShardDelete(_ context.Context, bucket, key, etag string) {
	o.shards.Delete(bucket, key, etag)
}

// coded returns an object coded RS(4+2) in 1 KiB chunks: its manifest
// and shards.
func coded(t *testing.T, data []byte) (*erasure.Manifest, [][]byte) {
	t.Helper()
	c := erasure.Config{DataShards: 4, ParityShards: 2, ChunkSize: 1024, Threshold: 1}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	m := erasure.NewManifest(c, "v1", int64(len(data)))
	cd, err := erasure.NewCoder(m)
	if err != nil {
		t.Fatal(err)
	}
	shards := make([][]byte, m.Shards())
	ss := int(m.StripeSize())
	for s := range m.Stripes() {
		pieces, err := cd.Encode(s, data[s*ss:min(len(data), (s+1)*ss)])
		if err != nil {
			t.Fatal(err)
		}
		for i, p := range pieces {
			shards[i] = append(shards[i], p...)
		}
	}
	return m, shards
}

func newShardPair(t *testing.T) (*Client, shardOwner, *httptest.Server) {
	t.Helper()
	auth, err := NewAuth("app1", []byte(secret), nil)
	if err != nil {
		t.Fatal(err)
	}
	owner := shardOwner{newFakeOwner(), erasure.NewStore(1 << 20)}
	srv := httptest.NewServer(NewServer(auth, owner, nil))
	t.Cleanup(srv.Close)
	cl := NewClient(auth, ClientConfig{})
	t.Cleanup(cl.Close)
	return cl, owner, srv
}

func TestShardPutGetDelete(t *testing.T) {
	cl, owner, srv := newShardPair(t)
	addr := strings.TrimPrefix(srv.URL, "http://")
	ctx := context.Background()
	m, shards := coded(t, randomBytes(10000)) // 3 stripes of 4 KiB
	enc := m.Encode()
	if err := cl.ShardPut(ctx, addr, "b", "k", "v1", 2, enc, bytes.NewReader(shards[2]), int64(len(shards[2]))); err != nil {
		t.Fatal(err)
	}
	sh, err := cl.ShardGet(ctx, addr, "b", "k", "v1", 1, 3)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(sh.Body)
	sh.Body.Close()
	if err != nil || sh.Index != 2 || sh.Manifest != enc || !bytes.Equal(got, shards[2][1024:3072]) {
		t.Fatalf("stripes 1-2 of shard 2: index %d, %d bytes, err %v", sh.Index, len(got), err)
	}
	// Which shard, no bytes.
	if sh, err = cl.ShardGet(ctx, addr, "b", "k", "v1", 0, 0); err != nil || sh.Index != 2 || sh.Size != 0 {
		t.Fatalf("index only: %+v %v", sh, err)
	}
	sh.Body.Close()
	if _, err := cl.ShardGet(ctx, addr, "b", "k", "v0", 0, -1); !errors.Is(err, store.ErrNoSuchKey) {
		t.Fatalf("another version: %v", err)
	}
	if _, err := cl.ShardGet(ctx, addr, "b", "k", "v1", 2, 9); !errors.Is(err, ErrBadRequest) {
		t.Fatalf("stripes past the end: %v", err)
	}
	if err := cl.ShardDelete(ctx, addr, "b", "k", "v0"); err != nil || owner.shards.Stats().Shards != 1 {
		t.Fatalf("delete of another version: %v, %d shards left", err, owner.shards.Stats().Shards)
	}
	if err := cl.ShardDelete(ctx, addr, "b", "k", "v1"); err != nil {
		t.Fatal(err)
	}
	if owner.shards.Stats().Shards != 0 {
		t.Fatal("shard kept after delete")
	}
}

// A shard whose bytes do not match its manifest, or a request not signed
// with the application's secret, leaves nothing behind; an answer from a
// server without the secret is refused.
func TestShardAttacker(t *testing.T) {
	cl, owner, srv := newShardPair(t)
	addr := strings.TrimPrefix(srv.URL, "http://")
	ctx := context.Background()
	m, shards := coded(t, randomBytes(5000))
	enc := m.Encode()

	bad := bytes.Clone(shards[0])
	bad[7] ^= 1
	if err := cl.ShardPut(ctx, addr, "b", "k", "v1", 0, enc, bytes.NewReader(bad), int64(len(bad))); !errors.Is(err, ErrBadRequest) {
		t.Fatalf("damaged shard: %v", err)
	}
	if err := cl.ShardPut(ctx, addr, "b", "k", "v1", 1, enc, bytes.NewReader(shards[0]), int64(len(shards[0]))); !errors.Is(err, ErrBadRequest) {
		t.Fatalf("shard 0's bytes as shard 1: %v", err)
	}
	if err := cl.ShardPut(ctx, addr, "b", "k", "v1", 0, "not-a-manifest", bytes.NewReader(shards[0]), int64(len(shards[0]))); !errors.Is(err, ErrBadRequest) {
		t.Fatalf("bad manifest: %v", err)
	}
	other, _ := NewAuth("app1", []byte("another-secret-0123456789"), nil)
	if err := NewClient(other, ClientConfig{}).ShardPut(ctx, addr, "b", "k", "v1", 0, enc, bytes.NewReader(shards[0]), int64(len(shards[0]))); !errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("wrong secret: %v", err)
	}
	if owner.shards.Stats().Shards != 0 {
		t.Fatalf("kept %d shards from refused writes", owner.shards.Stats().Shards)
	}
	// The holder's shards are not readable without the secret either.
	if err := cl.ShardPut(ctx, addr, "b", "k", "v1", 0, enc, bytes.NewReader(shards[0]), int64(len(shards[0]))); err != nil {
		t.Fatal(err)
	}
	if _, err := NewClient(other, ClientConfig{}).ShardGet(ctx, addr, "b", "k", "v1", 0, -1); !errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("read with the wrong secret: %v", err)
	}
	// A server that does not hold the secret answers with a shard and the
	// right manifest: refused before its bytes are used.
	fake := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(hdrManifest, enc)
		w.Header().Set(hdrIndex, "0")
		w.Header().Set(hdrAnswerBody, bodyStreamed)
		_, _ = w.Write(shards[0])
	}))
	defer fake.Close()
	if _, err := cl.ShardGet(ctx, strings.TrimPrefix(fake.URL, "http://"), "b", "k", "v1", 0, -1); !errors.Is(err, ErrAnswerUnauthenticated) {
		t.Fatalf("forged answer: %v", err)
	}
}

// backupOwner keeps backups in a second store, by origin.
type backupOwner struct {
	shardOwner
	backups *erasure.Store
	origins map[erasure.ShardKey]string
}

func (o backupOwner) PeerShardBackup(_ context.Context, origin, bucket, key, etag string, index int, manifest string, body io.Reader, size int64) error {
	k := erasure.ShardKey{Bucket: bucket, Key: key, ETag: etag, Index: index}
	if err := o.backups.Receive(k, manifest, body, size); err != nil {
		return fmt.Errorf("%w: %v", ErrBadRequest, err)
	}
	o.origins[k] = origin
	return nil
}

func (o backupOwner) PeerShardBackupDrop(_ context.Context, origin, bucket, key, etag string, index int) {
	for k, from := range o.origins {
		if from == origin && (bucket == "" || (k.Bucket == bucket && k.Key == key && (etag == "" || k.ETag == etag) && (index < 0 || k.Index == index))) {
			o.backups.Remove(k)
			delete(o.origins, k)
		}
	}
}

// A backup reaches the holder's backups, not its shards, with its origin;
// a holder that keeps none refuses it; damaged bytes and the wrong secret
// leave nothing.
func TestShardBackup(t *testing.T) {
	auth, err := NewAuth("app1", []byte(secret), nil)
	if err != nil {
		t.Fatal(err)
	}
	owner := backupOwner{shardOwner{newFakeOwner(), erasure.NewStore(1 << 20)}, erasure.NewStore(1 << 20), map[erasure.ShardKey]string{}}
	srv := httptest.NewServer(NewServer(auth, owner, nil))
	defer srv.Close()
	cl := NewClient(auth, ClientConfig{})
	defer cl.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	ctx := context.Background()
	m, shards := coded(t, randomBytes(5000))
	enc := m.Encode()
	if err := cl.ShardBackup(ctx, addr, "10.0.0.7:7001", "b", "k", "v1", 3, enc, bytes.NewReader(shards[3]), int64(len(shards[3]))); err != nil {
		t.Fatal(err)
	}
	k := erasure.ShardKey{Bucket: "b", Key: "k", ETag: "v1", Index: 3}
	if owner.backups.Peek(k) == nil || owner.shards.Stats().Shards != 0 || owner.origins[k] != "10.0.0.7:7001" {
		t.Fatalf("backup kept %v, own shards %d, origin %q", owner.backups.Peek(k) != nil, owner.shards.Stats().Shards, owner.origins[k])
	}
	bad := bytes.Clone(shards[2])
	bad[0] ^= 1
	if err := cl.ShardBackup(ctx, addr, "10.0.0.7:7001", "b", "k", "v1", 2, enc, bytes.NewReader(bad), int64(len(bad))); !errors.Is(err, ErrBadRequest) {
		t.Fatalf("damaged backup: %v", err)
	}
	other, _ := NewAuth("app1", []byte("another-secret-0123456789"), nil)
	if err := NewClient(other, ClientConfig{}).ShardBackup(ctx, addr, "x", "b", "k", "v1", 2, enc, bytes.NewReader(shards[2]), int64(len(shards[2]))); !errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("wrong secret: %v", err)
	}
	if owner.backups.Stats().Shards != 1 {
		t.Fatalf("kept %d backups, want the one", owner.backups.Stats().Shards)
	}
	if err := cl.ShardBackup(ctx, addr, "", "b", "k", "v1", 2, enc, bytes.NewReader(shards[2]), int64(len(shards[2]))); !errors.Is(err, ErrBadRequest) {
		t.Fatalf("no origin: %v", err)
	}
	// Drops: another origin's name drops nothing; bad input is refused
	// and drops nothing; the origin's drop of its shard does.
	if err := cl.ShardBackupDrop(ctx, addr, "10.0.0.8:7001", "", "", "", -1); err != nil || owner.backups.Peek(k) == nil {
		t.Fatalf("another origin's reset: %v, kept %v", err, owner.backups.Peek(k) != nil)
	}
	for _, q := range []string{"backup=o&bucket=b", "backup=o&etag=v1", "backup=o&bucket=b&key=k&index=x", "backup=10.0.0.7:7001&index=3"} {
		req, _ := http.NewRequest(http.MethodDelete, srv.URL+"/v1/shard?"+q, nil)
		resp, err := cl.do(cl.http, req, addr)
		if err == nil {
			err = readError(resp)
			resp.Body.Close()
		}
		if !errors.Is(err, ErrBadRequest) || owner.backups.Peek(k) == nil {
			t.Fatalf("drop %s: %v, kept %v", q, err, owner.backups.Peek(k) != nil)
		}
	}
	if err := NewClient(other, ClientConfig{}).ShardBackupDrop(ctx, addr, "10.0.0.7:7001", "", "", "", -1); !errors.Is(err, ErrUnauthenticated) || owner.backups.Peek(k) == nil {
		t.Fatalf("a drop with the wrong secret: %v, kept %v", err, owner.backups.Peek(k) != nil)
	}
	if err := cl.ShardBackupDrop(ctx, addr, "", "b", "k", "v1", 3); !errors.Is(err, ErrBadRequest) {
		t.Fatalf("a drop without origin: %v", err)
	}
	if err := cl.ShardBackupDrop(ctx, addr, "10.0.0.7:7001", "b", "k", "v1", 2); err != nil || owner.backups.Peek(k) == nil {
		t.Fatalf("drop of another index: %v, kept %v", err, owner.backups.Peek(k) != nil)
	}
	if err := cl.ShardBackupDrop(ctx, addr, "10.0.0.7:7001", "b", "k", "v1", 3); err != nil || owner.backups.Peek(k) != nil {
		t.Fatalf("drop of the backup: %v, kept %v", err, owner.backups.Peek(k) != nil)
	}
	// A holder that keeps no backups refuses one.
	_, _, plain := newShardPair(t)
	if err := cl.ShardBackup(ctx, strings.TrimPrefix(plain.URL, "http://"), "o", "b", "k", "v1", 2, enc, bytes.NewReader(shards[2]), int64(len(shards[2]))); !errors.Is(err, ErrBadRequest) {
		t.Fatalf("to a holder without backups: %v", err)
	}
}
