package cachelet

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"hash/crc32"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hoard-io/hoard/internal/cache"
	"github.com/hoard-io/hoard/internal/peer"
	"github.com/hoard-io/hoard/internal/store"
	"github.com/hoard-io/hoard/internal/store/memstore"
	"github.com/hoard-io/hoard/internal/writelog"
)

// bkRouter is a staticRouter that also picks backups (BackupRing): every
// other present member, in address order.
type bkRouter struct {
	*staticRouter
	id      string
	idOf    map[string]string // address -> member ID
	pmu     sync.Mutex
	present map[string]bool // by ID
}

func (r *bkRouter) DurableBackups(_, _ string) ([]string, int) {
	r.pmu.Lock()
	defer r.pmu.Unlock()
	var out []string
	for _, a := range r.all {
		if a != r.self && r.present[r.idOf[a]] {
			out = append(out, a)
		}
	}
	return out, len(out)
}

// BackupsOf lists the present members but owner, in address order.
func (r *bkRouter) BackupsOf(owner, _, _ string) []string {
	r.pmu.Lock()
	defer r.pmu.Unlock()
	var out []string
	for _, a := range r.all {
		if a != owner && r.present[r.idOf[a]] {
			out = append(out, a)
		}
	}
	return out
}

func (r *bkRouter) Present(id string) bool {
	r.pmu.Lock()
	defer r.pmu.Unlock()
	return r.present[id]
}

func (r *bkRouter) ID() string { return r.id }

// PeerAddrs lists the other present members.
func (r *bkRouter) PeerAddrs() []string {
	r.pmu.Lock()
	defer r.pmu.Unlock()
	var out []string
	for _, a := range r.all {
		if a != r.self && r.present[r.idOf[a]] {
			out = append(out, a)
		}
	}
	return out
}

func (r *bkRouter) gone(id string) {
	r.pmu.Lock()
	r.present[id] = false
	r.pmu.Unlock()
}

// bkMember is one cachelet of a replicated group.
type bkMember struct {
	c      *Cachelet
	log    *writelog.Log
	st     *outage // its own view of the shared store: down on its own
	router *bkRouter
	srv    *httptest.Server
	logs   *lockedWriter
}

// said is what the member logged so far.
func (m *bkMember) said() string {
	m.logs.mu.Lock()
	defer m.logs.mu.Unlock()
	return m.logs.w.(*strings.Builder).String()
}

// newBackupGroup is n cachelets of one application under the owner
// setting with replicated durable writes, every key owned by the first,
// over one memory store that each reaches through its own outage.
func newBackupGroup(t testing.TB, n int, backup BackupConfig) (*memstore.Store, []*bkMember) {
	t.Helper()
	return newDurableGroup(t, n, &backup)
}

// newDurableGroup is newBackupGroup, with the single log (no backups)
// where backup is nil.
func newDurableGroup(t testing.TB, n int, backup *BackupConfig) (*memstore.Store, []*bkMember) {
	t.Helper()
	return newDurableGroupShadow(t, n, backup, false)
}

// newDurableGroupShadow is newDurableGroup, with shadows where shadow is
// set.
func newDurableGroupShadow(t testing.TB, n int, backup *BackupConfig, shadow bool) (*memstore.Store, []*bkMember) {
	t.Helper()
	mem := memstore.New()
	if err := mem.CreateBucket(t.Context(), testBucket, ""); err != nil {
		t.Fatal(err)
	}
	auth, err := peer.NewAuth("app", []byte("a-secret-of-at-least-16-bytes"), nil)
	if err != nil {
		t.Fatal(err)
	}
	client := peer.NewClient(auth, peer.ClientConfig{})
	t.Cleanup(client.Close)
	var srvs []*httptest.Server
	var addrs []string
	idOf := map[string]string{}
	present := map[string]bool{}
	for i := range n {
		srv := httptest.NewUnstartedServer(nil)
		srvs = append(srvs, srv)
		addrs = append(addrs, srv.Listener.Addr().String())
		id := "m" + string(rune('0'+i))
		idOf[addrs[i]], present[id] = id, true
	}
	var ms []*bkMember
	for i := range n {
		r := &bkRouter{staticRouter: &staticRouter{self: addrs[i], owner: addrs[0], all: addrs}, id: idOf[addrs[i]], idOf: idOf, present: map[string]bool{}}
		for k, v := range present {
			r.present[k] = v
		}
		l, _, err := writelog.Open(writelog.Config{Dir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		st := &outage{Store: mem}
		var b *BackupConfig
		if backup != nil {
			cp := *backup
			b = &cp
		}
		logs := &lockedWriter{w: &strings.Builder{}}
		c, err := New(Config{Cache: cache.Config{Budget: testBudget, MaxObjectSize: testMaxSize},
			WriteTarget: WriteOwner, ReadMode: ReadOwner, DrainTimeout: 100 * time.Millisecond,
			Router: r, Peers: client, Log: l, Backup: b, Shadow: shadow, ShadowKey: testShadowKey}, st, slog.New(slog.NewTextHandler(logs, nil)), nil)
		if err != nil {
			t.Fatal(err)
		}
		srvs[i].Config.Handler = peer.NewServer(auth, c, nil)
		srvs[i].Start()
		m := &bkMember{c: c, log: l, st: st, router: r, srv: srvs[i], logs: logs}
		t.Cleanup(func() { m.srv.Close(); m.c.Close(); m.log.Close() })
		ms = append(ms, m)
	}
	for _, m := range ms {
		if err := m.c.waitHandoff(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	return mem, ms
}

type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func putThrough(t *testing.T, c *Cachelet, key string, data []byte) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	_, err := c.Put(ctx, testBucket, key, bytes.NewReader(data), int64(len(data)), store.PutOptions{})
	return err
}

// A write is acknowledged once the owner and its backup both logged it;
// once the store has it, the owner's done marks let the backup drop it.
func TestReplicatedWriteIsKeptTwice(t *testing.T) {
	_, ms := newBackupGroup(t, 2, BackupConfig{})
	a, b := ms[0], ms[1]
	a.st.down.Store(true) // writes stay queued at the owner
	v1 := object("k", 1, 3000)
	if err := putThrough(t, a.c, "k", v1); err != nil {
		t.Fatal(err)
	}
	if n := b.log.Stats().LiveRecords; n != 1 {
		t.Fatalf("backup's log holds %d records, want 1", n)
	}
	if got := toFloat64(a.c.bk.m.sent); got != 1 {
		t.Fatalf("sent %v, want 1", got)
	}
	if got := toFloat64(b.c.bk.m.received.WithLabelValues("kept")); got != 1 {
		t.Fatalf("backup kept %v, want 1", got)
	}
	a.st.down.Store(false)
	if err := a.c.Drain(t.Context()); err != nil {
		t.Fatal(err)
	}
	a.c.flushBackupDone(t.Context())
	if n := b.log.Stats().LiveRecords; n != 0 {
		t.Fatalf("backup's log holds %d records once the store has the write", n)
	}
	if b.c.bk.bytes != 0 {
		t.Fatalf("backup still counts %d bytes", b.c.bk.bytes)
	}
}

// The owner is lost with its node (its store queue never delivers): the
// backup, once membership drops the owner, delivers the newest write of
// each key, guarded (a key written meanwhile by another route keeps the
// newer bytes), and serves the delivered write as the keys' new owner.
func TestReplicatedOwnerLossDelivers(t *testing.T) {
	// No periodic done marks: had k1's first write been replaced in the
	// owner's queue before it started, its done mark could reach the
	// backup before the count of its records below.
	mem, ms := newBackupGroup(t, 2, BackupConfig{DoneInterval: time.Hour})
	a, b := ms[0], ms[1]
	a.st.down.Store(true)
	for _, w := range []struct {
		key string
		v   int
	}{{"k1", 1}, {"k1", 2}, {"k2", 1}, {"k3", 1}} {
		if err := putThrough(t, a.c, w.key, object(w.key, w.v, 2000)); err != nil {
			t.Fatal(err)
		}
	}
	if n := b.log.Stats().LiveRecords; n != 4 {
		t.Fatalf("backup's log holds %d records, want 4", n)
	}
	// The owner is gone (its node with it); another route writes k3.
	a.srv.Close()
	newer := object("k3", 9, 100)
	if _, err := mem.Put(t.Context(), testBucket, "k3", bytes.NewReader(newer), int64(len(newer)), store.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	b.router.gone("m0")
	b.c.OwnershipChanging()
	b.router.set(b.router.self)
	b.c.OwnershipChanged()
	// Reads through the new owner are served the delivered writes,
	// never the store's older version (none here).
	got, _, err := readWith(t.Context(), b.c, "k1", nil)
	if err != nil || !bytes.Equal(got, object("k1", 2, 2000)) {
		t.Fatalf("new owner read k1: %d bytes, %v; want v2", len(got), err)
	}
	if err := b.c.Drain(t.Context()); err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string][]byte{"k1": object("k1", 2, 2000), "k2": object("k2", 1, 2000), "k3": newer} {
		if got := storeBytes(t, mem, key); !bytes.Equal(got, want) {
			t.Fatalf("store has %d bytes of %s, want %d", len(got), key, len(want))
		}
	}
	for result, want := range map[string]float64{"delivered": 2, "superseded": 1, "replaced": 1} {
		if got := toFloat64(b.c.bk.m.delivered.WithLabelValues(result)); got != want {
			t.Errorf("delivered{%s} = %v, want %v", result, got, want)
		}
	}
	if n := b.log.Stats().LiveRecords; n != 0 {
		t.Fatalf("backup's log holds %d records once delivered", n)
	}
}

// When the member keeping the copies of an owner's writes leaves, the
// owner sends the writes the store does not have yet to another member;
// once the store has them, that member drops them too.
func TestReplicatedBackupLossSendsCopiesAgain(t *testing.T) {
	_, ms := newBackupGroup(t, 3, BackupConfig{})
	a, b, c := ms[0], ms[1], ms[2]
	a.st.down.Store(true)
	for _, k := range []string{"k1", "k2"} {
		if err := putThrough(t, a.c, k, object(k, 1, 1500)); err != nil {
			t.Fatal(err)
		}
	}
	if n, m := b.log.Stats().LiveRecords, c.log.Stats().LiveRecords; n != 2 || m != 0 {
		t.Fatalf("backups hold %d and %d records, want 2 and 0", n, m)
	}
	b.srv.Close()
	a.router.gone("m1")
	a.c.OwnershipChanged()
	deadline := time.Now().Add(5 * time.Second)
	// The owner counts a copy sent once the new backup answered it.
	for c.log.Stats().LiveRecords != 2 || toFloat64(a.c.bk.m.resent) != 2 {
		if time.Now().After(deadline) {
			t.Fatalf("the new backup holds %d records, want 2; resent %v, want 2", c.log.Stats().LiveRecords, toFloat64(a.c.bk.m.resent))
		}
		time.Sleep(5 * time.Millisecond)
	}
	a.st.down.Store(false)
	if err := a.c.Drain(t.Context()); err != nil {
		t.Fatal(err)
	}
	a.c.flushBackupDone(t.Context())
	if n := c.log.Stats().LiveRecords; n != 0 {
		t.Fatalf("the new backup holds %d records once the store has the writes", n)
	}
}

// With no backup answering, a write is acknowledged only once the store
// has it, and refused (unavailable) when the store cannot take it in
// time: never acknowledged on one copy.
func TestReplicatedWithoutBackupWritesThrough(t *testing.T) {
	mem, ms := newBackupGroup(t, 2, BackupConfig{Timeout: 200 * time.Millisecond})
	a := ms[0]
	ms[1].srv.Close()
	v1 := object("k", 1, 1000)
	if err := putThrough(t, a.c, "k", v1); err != nil {
		t.Fatalf("write with the backup down and the store up: %v", err)
	}
	if got := storeBytes(t, mem, "k"); !bytes.Equal(got, v1) {
		t.Fatal("acknowledged before the store had it")
	}
	a.st.down.Store(true)
	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	defer cancel()
	v2 := object("k", 2, 1000)
	if _, err := a.c.Put(ctx, testBucket, "k", bytes.NewReader(v2), int64(len(v2)), store.PutOptions{}); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("write with the backup and the store down: %v, want unavailable", err)
	}
	if got := toFloat64(a.c.bk.m.through); got != 2 {
		t.Fatalf("through %v, want 2", got)
	}
	if got := toFloat64(a.c.bk.m.sent); got != 0 {
		t.Fatalf("sent %v, want 0", got)
	}
}

// Alone in its application, a replicated cachelet logs its writes once
// (one copy) and says so once.
func TestReplicatedAloneUsesTheLog(t *testing.T) {
	_, ms := newBackupGroup(t, 1, BackupConfig{})
	a := ms[0]
	a.st.down.Store(true)
	for v := range 3 {
		if err := putThrough(t, a.c, "k", object("k", v, 500)); err != nil {
			t.Fatal(err)
		}
	}
	if got := toFloat64(a.c.bk.m.alone); got != 3 {
		t.Fatalf("alone %v, want 3", got)
	}
	if n := strings.Count(a.said(), "no other member"); n != 1 {
		t.Fatalf("said %d times that it is alone, want once:\n%s", n, a.said())
	}
}

// Nobody outside the application can have a backup kept: a request
// unsigned, or signed with another application's key, is refused; so is
// a record whose bytes do not match its CRC32C or version, one naming
// this cachelet as its owner, and one past the bound. Nothing is kept.
func TestReplicatedBackupRefusesForgeries(t *testing.T) {
	_, ms := newBackupGroup(t, 2, BackupConfig{MaxBytes: 8 << 10})
	b := ms[1]
	addr := b.srv.Listener.Addr().String()
	data := object("k", 1, 1000)
	sum := md5.Sum(data)
	rec := peer.BackupRecord{Owner: "m0", Incarnation: 1, Seq: 1, Bucket: testBucket, Key: "k", ETag: hex.EncodeToString(sum[:])}
	for _, a := range []struct{ app, secret string }{{"other", "a-secret-of-at-least-16-bytes"}, {"app", "not-the-application-secret"}} {
		auth, err := peer.NewAuth(a.app, []byte(a.secret), nil)
		if err != nil {
			t.Fatal(err)
		}
		cl := peer.NewClient(auth, peer.ClientConfig{})
		if err := cl.Backup(t.Context(), addr, rec, data); err == nil {
			t.Fatalf("backup signed by %s with a foreign key was kept", a.app)
		}
		cl.Close()
	}
	resp, err := httpPut("http://"+addr+"/v1/backup", data)
	if err != nil {
		t.Fatal(err)
	}
	if resp != 403 {
		t.Fatalf("unsigned backup answered %d, want 403", resp)
	}
	body := func(d []byte) io.Reader { return bytes.NewReader(d) }
	bad := append([]byte(nil), data...)
	bad[7] ^= 1
	r := rec
	r.Size, r.CRC32C = int64(len(data)), crc32.Checksum(data, crc32.MakeTable(crc32.Castagnoli))
	if err := b.c.PeerBackup(t.Context(), r, body(bad)); err == nil {
		t.Fatal("a record whose bytes do not match its CRC32C was kept")
	}
	r2 := r
	r2.ETag = "0123456789abcdef0123456789abcdef"
	if err := b.c.PeerBackup(t.Context(), r2, body(data)); err == nil {
		t.Fatal("a record whose bytes do not make its version was kept")
	}
	r3 := r
	r3.Owner = "m1"
	if err := b.c.PeerBackup(t.Context(), r3, body(data)); err == nil {
		t.Fatal("a backup of the cachelet's own write was kept")
	}
	big := object("k", 2, 9000)
	r4 := r
	r4.Size, r4.CRC32C = int64(len(big)), crc32.Checksum(big, crc32.MakeTable(crc32.Castagnoli))
	if err := b.c.PeerBackup(t.Context(), r4, body(big)); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("a backup past the bound: %v, want unavailable", err)
	}
	if n := b.log.Stats().LiveRecords; n != 0 || b.c.bk.bytes != 0 || len(b.c.bk.held) != 0 {
		t.Fatalf("refused backups left %d records, %d bytes, %d owners", n, b.c.bk.bytes, len(b.c.bk.held))
	}
	// The genuine one is kept.
	if err := b.c.PeerBackup(t.Context(), r, body(data)); err != nil {
		t.Fatalf("genuine backup: %v", err)
	}
}

// httpPut sends an unsigned PUT and returns its status.
func httpPut(url string, data []byte) (int, error) {
	req, err := http.NewRequest(http.MethodPut, url, bytes.NewReader(data))
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// storeBytes is what the store holds of key (nil: nothing).
func storeBytes(t *testing.T, mem *memstore.Store, key string) []byte {
	t.Helper()
	body, _, _, err := mem.Get(t.Context(), testBucket, key, store.GetOptions{})
	if err != nil {
		return nil
	}
	defer body.Close()
	b, _ := io.ReadAll(body)
	return b
}
