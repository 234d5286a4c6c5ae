package cachelet

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hoard-io/hoard/internal/store"
)

// cput writes through the cachelet.
func (e *env) cput(key string, data []byte) store.PutResult {
	e.t.Helper()
	res, err := e.c.Put(e.t.Context(), testBucket, key, bytes.NewReader(data), int64(len(data)), store.PutOptions{})
	if err != nil {
		e.t.Fatalf("cachelet Put(%s): %v", key, err)
	}
	return res
}

func TestPutThenGetIsAHit(t *testing.T) {
	e := newEnv(t, nil)
	data := object("k", 1, 50<<10)
	res := e.cput("k", data)
	info, err := e.st.Stat(t.Context(), testBucket, "k")
	if err != nil {
		t.Fatal(err)
	}
	if res.ETag != info.ETag {
		t.Errorf("Put ETag %q, store says %q", res.ETag, info.ETag)
	}
	obj := e.mustRead("k", data, LocalHit)
	if obj.Info.ETag != info.ETag || !obj.Info.LastModified.Equal(info.LastModified) {
		t.Errorf("cached info %+v, want the store's ETag %q and LastModified %v", obj.Info, info.ETag, info.LastModified)
	}
	if g := e.st.GetCounts(); g.Bodies != 0 {
		t.Errorf("store Gets %+v: a written object must not be downloaded", g)
	}
	if got := toFloat64(e.c.m.writes.WithLabelValues("put", "ok")); got != 1 {
		t.Errorf("writes{put,ok} = %v", got)
	}
}

func TestPutNotKept(t *testing.T) {
	for _, tc := range []struct {
		name string
		opt  func(*Config)
		size func(n int) int64
	}{
		{"write caching disabled", func(c *Config) { c.DisableWriteCaching = true }, func(n int) int64 { return int64(n) }},
		{"unknown size", nil, func(int) int64 { return -1 }},
		{"too large", nil, func(int) int64 { return testMaxSize + 1 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, tc.opt)
			size := 1000
			if tc.name == "too large" {
				size = testMaxSize + 1
			}
			data := object("k", 1, size)
			if _, err := e.c.Put(t.Context(), testBucket, "k", bytes.NewReader(data), tc.size(size), store.PutOptions{}); err != nil {
				t.Fatal(err)
			}
			if s := e.c.Stats(); s.Objects != 0 || s.Reserved != 0 {
				t.Errorf("stats %+v, want nothing kept", s)
			}
			want := LocalMiss
			if size > testMaxSize {
				want = PassThrough
			}
			e.mustRead("k", data, want)
		})
	}
}

// A write the store refuses leaves nothing in memory, and the old copy
// goes too: the cachelet cannot know what the store now holds.
func TestPutRefusedByTheStore(t *testing.T) {
	e := newEnv(t, nil)
	old := object("k", 1, 1000)
	e.cput("k", old)
	bad := errors.New("signature mismatch")
	body := io.MultiReader(strings.NewReader("part of it"), &errReader{bad})
	if _, err := e.c.Put(t.Context(), testBucket, "k", body, 100, store.PutOptions{}); !errors.Is(err, bad) {
		t.Fatalf("Put = %v, want the body's error", err)
	}
	if s := e.c.Stats(); s.Objects != 0 || s.Reserved != 0 {
		t.Errorf("stats %+v, want nothing held", s)
	}
	e.mustRead("k", old, LocalMiss) // the store kept the old version
	if got := toFloat64(e.c.m.writes.WithLabelValues("put", "error")); got != 1 {
		t.Errorf("writes{put,error} = %v", got)
	}
}

type errReader struct{ err error }

func (r *errReader) Read([]byte) (int, error) { return 0, r.err }

// A write through the cachelet racing a slow fill of the same key never
// leaves the old bytes cached. ReadLocal trusts memory, so a stale copy
// would be served.
func TestPutRacingASlowFill(t *testing.T) {
	e := newEnv(t, readLocal)
	v1, v2 := object("k", 1, 100<<10), object("k", 2, 90<<10)
	e.storePut("k", v1)
	hold := e.st.HoldBody(testBucket, "k", 30<<10)

	slow, err := e.c.Get(t.Context(), testBucket, "k", nil)
	if err != nil {
		t.Fatal(err)
	}
	<-hold.Reached() // the fill is in flight, a third through
	e.cput("k", v2)
	hold.Release()

	// The reader that started before the write gets the old version, whole.
	got, err := io.ReadAll(slow.Body)
	slow.Body.Close()
	if err != nil || !bytes.Equal(got, v1) {
		t.Errorf("slow reader got %d bytes, %v; want v1 whole", len(got), err)
	}
	e.settle()
	e.mustRead("k", v2, LocalHit)
	if e.fills("doomed") != 1 {
		t.Errorf("fills{doomed} = %v, want 1", e.fills("doomed"))
	}
	e.checkBudget()
	if s := e.c.Stats(); s.Reserved != 0 || s.Bytes != int64(len(v2)) {
		t.Errorf("stats %+v, want only v2 held", s)
	}
}

// A download whose store GET was answered before a write reached the store,
// but whose fill ends after the write returned, must not land over the
// written version: the write's Invalidate ran before that GET existed, so
// only the write's own bookkeeping after the store acknowledged can stop it.
func TestPutRacingAFillThatStartedBeforeTheStoreWrite(t *testing.T) {
	e := newEnv(t, readLocal)
	v1, v2 := object("k", 1, 100<<10), object("k", 2, 100<<10)
	e.storePut("k", v1)

	// The write starts: the cachelet invalidates, then the store reads the
	// body, which the test feeds.
	pr, pw := io.Pipe()
	putDone := make(chan error, 1)
	go func() {
		_, err := e.c.Put(t.Context(), testBucket, "k", pr, int64(len(v2)), store.PutOptions{})
		putDone <- err
	}()
	if _, err := pw.Write(v2[:1000]); err != nil { // the store is reading it
		t.Fatal(err)
	}

	// A cold read now gets v1 from the store; its fill is held.
	hold := e.st.HoldBody(testBucket, "k", 10)
	slow, err := e.c.Get(t.Context(), testBucket, "k", nil)
	if err != nil {
		t.Fatal(err)
	}
	<-hold.Reached()

	// The write completes and returns.
	if _, err := pw.Write(v2[1000:]); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	if err := <-putDone; err != nil {
		t.Fatalf("Put: %v", err)
	}
	// Then the old download ends.
	hold.Release()
	if got, _ := io.ReadAll(slow.Body); !bytes.Equal(got, v1) {
		t.Errorf("the read that began before the write returned got %d bytes, want v1", len(got))
	}
	slow.Body.Close()
	e.settle()
	e.mustRead("k", v2, LocalHit)
}

// A delete through the cachelet while a cold read's store GET is in flight:
// no read that starts after the delete returned may see the old bytes.
func TestDeleteDuringAColdReadsRequest(t *testing.T) {
	e := newEnv(t, readLocal)
	v1 := object("k", 1, 100<<10)
	e.storePut("k", v1)
	getHold := e.st.HoldGet(testBucket, "k")
	bodyHold := e.st.HoldBody(testBucket, "k", 10)

	type result struct {
		data []byte
		err  error
	}
	first := make(chan result, 1)
	go func() {
		data, _, err := e.read("k", nil)
		first <- result{data, err}
	}()
	<-getHold.Reached() // the store has answered v1; the cachelet has not seen it
	if err := e.c.Delete(t.Context(), testBucket, "k"); err != nil {
		t.Fatal(err)
	}
	getHold.Release()
	<-bodyHold.Reached() // the old answer is being downloaded

	// The delete has returned: a new read must not get v1.
	obj, err := e.c.Get(t.Context(), testBucket, "k", nil)
	bodyHold.Release()
	if obj != nil {
		data, _ := io.ReadAll(obj.Body)
		obj.Body.Close()
		t.Errorf("read after Delete returned = %d bytes (%s; v1: %v), want ErrNoSuchKey",
			len(data), obj.Outcome, bytes.Equal(data, v1))
	} else if !errors.Is(err, store.ErrNoSuchKey) {
		t.Errorf("read after Delete returned = %v, want ErrNoSuchKey", err)
	}
	if r := <-first; r.err != nil || !bytes.Equal(r.data, v1) {
		t.Errorf("the read that began before the delete = %d bytes, %v; want v1", len(r.data), r.err)
	}
	e.settle()
	if _, _, err := e.read("k", nil); !errors.Is(err, store.ErrNoSuchKey) {
		t.Errorf("read once settled = %v, want ErrNoSuchKey", err)
	}
	if s := e.c.Stats(); s.Objects != 0 || s.Reserved != 0 {
		t.Errorf("stats %+v, want nothing held", s)
	}
}

// A read that starts after a delete returned must not join a cold read's
// store request sent before the delete: that request's answer is the old
// version.
func TestReadAfterDeleteDoesNotJoinAnOlderRequest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, readLocal)
		v1 := object("k", 1, 10<<10)
		e.storePut("k", v1)
		hold := e.st.HoldGet(testBucket, "k")
		first := make(chan error, 1)
		go func() {
			got, _, err := e.read("k", nil)
			if err == nil && !bytes.Equal(got, v1) {
				err = errors.New("wrong bytes")
			}
			first <- err
		}()
		<-hold.Reached()
		if err := e.c.Delete(t.Context(), testBucket, "k"); err != nil {
			t.Fatal(err)
		}
		second := make(chan error, 1)
		go func() {
			got, _, err := e.read("k", nil)
			if err == nil {
				err = fmt.Errorf("read %d bytes (v1: %v)", len(got), bytes.Equal(got, v1))
			}
			second <- err
		}()
		synctest.Wait() // the second read is waiting: on the store, or on the first read
		hold.Release()
		if err := <-first; err != nil {
			t.Errorf("the read that began before the delete: %v", err)
		}
		if err := <-second; !errors.Is(err, store.ErrNoSuchKey) {
			t.Errorf("the read that began after the delete: %v, want ErrNoSuchKey", err)
		}
	})
}

// Every write path drops the cached copy of what it changed. ReadLocal
// trusts memory, so a copy left behind would be served.
func TestWritesInvalidate(t *testing.T) {
	ctx := t.Context()
	for _, tc := range []struct {
		name  string
		write func(e *env) error
		want  []byte // what "k" reads as afterwards; nil: ErrNoSuchKey
	}{
		{"Delete", func(e *env) error { return e.c.Delete(ctx, testBucket, "k") }, nil},
		{"DeleteMany", func(e *env) error {
			failed, err := e.c.DeleteMany(ctx, testBucket, []string{"other", "k"})
			if len(failed) > 0 {
				t.Errorf("DeleteMany failed for %v", failed)
			}
			return err
		}, nil},
		{"Copy", func(e *env) error {
			e.storePut("src", object("src", 1, 3000))
			_, err := e.c.Copy(ctx, store.CopySource{Bucket: testBucket, Key: "src"}, testBucket, "k", store.CopyOptions{})
			return err
		}, object("src", 1, 3000)},
		{"CompleteMultipartUpload", func(e *env) error {
			id, err := e.st.CreateMultipartUpload(ctx, testBucket, "k", store.PutOptions{})
			if err != nil {
				return err
			}
			data := object("k", 2, 1000)
			p, err := e.st.UploadPart(ctx, testBucket, "k", id, 1, bytes.NewReader(data), int64(len(data)), store.PutOptions{})
			if err != nil {
				return err
			}
			_, err = e.c.CompleteMultipartUpload(ctx, testBucket, "k", id, []store.Part{p}, store.CompleteOptions{})
			return err
		}, object("k", 2, 1000)},
		{"Put of unknown size", func(e *env) error {
			_, err := e.c.Put(ctx, testBucket, "k", bytes.NewReader(object("k", 3, 500)), -1, store.PutOptions{})
			return err
		}, object("k", 3, 500)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, readLocal)
			v1 := object("k", 1, 2000)
			e.storePut("k", v1)
			e.storePut("other", object("other", 1, 10))
			e.mustRead("k", v1, LocalMiss)
			e.settle()
			if err := tc.write(e); err != nil {
				t.Fatalf("write: %v", err)
			}
			got, _, err := e.read("k", nil)
			switch {
			case tc.want == nil && !errors.Is(err, store.ErrNoSuchKey):
				t.Errorf("read after the write = %d bytes, %v; want ErrNoSuchKey", len(got), err)
			case tc.want != nil && (err != nil || !bytes.Equal(got, tc.want)):
				t.Errorf("read after the write = %d bytes, %v; want the new %d bytes", len(got), err, len(tc.want))
			}
		})
	}
}

func TestDeleteBucketDropsItsObjects(t *testing.T) {
	e := newEnv(t, readLocal)
	data := object("k", 1, 1000)
	e.storePut("k", data)
	e.mustRead("k", data, LocalMiss)
	e.settle()
	// Emptied behind the cachelet's back, then deleted through it.
	if err := e.st.Delete(t.Context(), testBucket, "k"); err != nil {
		t.Fatal(err)
	}
	if err := e.c.DeleteBucket(t.Context(), testBucket); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.read("k", nil); !errors.Is(err, store.ErrNoSuchBucket) {
		t.Errorf("read after DeleteBucket = %v, want ErrNoSuchBucket", err)
	}
	// A refused DeleteBucket (not empty) keeps the cache.
	e2 := newEnv(t, readLocal)
	e2.storePut("k", data)
	e2.mustRead("k", data, LocalMiss)
	e2.settle()
	if err := e2.c.DeleteBucket(t.Context(), testBucket); !errors.Is(err, store.ErrBucketNotEmpty) {
		t.Fatalf("DeleteBucket(non-empty) = %v", err)
	}
	e2.mustRead("k", data, LocalHit)
}

// Concurrent writers and readers of a few keys under ReadVersionCheck:
// every read returns some version written whole, and once the writers are
// done, every key reads as its last write.
func TestConcurrentWritesAndReads(t *testing.T) {
	e := newEnv(t, nil)
	keys := []string{"a", "b", "c"}
	last := make(map[string][]byte)
	for _, k := range keys {
		last[k] = object(k, 0, 20<<10)
		e.cput(k, last[k])
	}
	done := make(chan struct{})
	readerErr := make(chan error, 1)
	go func() {
		defer close(readerErr)
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			default:
			}
			k := keys[i%len(keys)]
			got, obj, err := e.read(k, nil)
			if err != nil {
				readerErr <- err
				return
			}
			if int64(len(got)) != obj.Info.Size || len(got) < 20<<10 {
				readerErr <- errors.New("short read")
				return
			}
		}
	}()
	for v := 1; v <= 30; v++ {
		for _, k := range keys {
			last[k] = object(k, v, 20<<10+v)
			e.cput(k, last[k])
		}
	}
	close(done)
	if err := <-readerErr; err != nil {
		t.Fatalf("concurrent read: %v", err)
	}
	e.settle()
	for _, k := range keys {
		e.mustRead(k, last[k], LocalHit)
	}
	e.checkBudget()
}

// Two writes of one key overlap, and the one that began first reaches the
// store last: its bytes are the store's, so the other's must not stay
// cached (ReadLocal would serve them). Neither copy is kept.
func TestOverlappingPutsLeaveNoOlderCopy(t *testing.T) {
	e := newEnv(t, readLocal)
	va, vb := object("k", 1, 10<<10), object("k", 2, 10<<10)
	pr, pw := io.Pipe()
	first := make(chan error, 1)
	go func() {
		_, err := e.c.Put(t.Context(), testBucket, "k", pr, int64(len(va)), store.PutOptions{})
		first <- err
	}()
	if _, err := pw.Write(va[:1000]); err != nil { // the first write is under way
		t.Fatal(err)
	}
	e.cput("k", vb) // the second begins and ends
	if _, err := pw.Write(va[1000:]); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	if err := <-first; err != nil { // the first reaches the store last
		t.Fatal(err)
	}
	e.mustRead("k", va, LocalMiss)
}

// TestConditionalPutRefused: a write the store refuses for its condition
// leaves reads seeing the version the store holds, under every write
// target (the buffered ones included: only the store can judge).
func TestConditionalPutRefused(t *testing.T) {
	for _, target := range []WriteTarget{WriteStore, WriteLocal, WriteOwner} {
		t.Run(string(target), func(t *testing.T) {
			e := newEnv(t, func(c *Config) { c.WriteTarget = target })
			ctx := t.Context()
			v1, v2 := object("k", 1, 1000), object("k", 2, 1000)
			put := func(data []byte, opts store.PutOptions) (store.PutResult, error) {
				return e.c.Put(ctx, testBucket, "k", bytes.NewReader(data), int64(len(data)), opts)
			}
			res, err := put(v1, store.PutOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if err := e.c.Drain(ctx); err != nil {
				t.Fatal(err)
			}
			e.mustRead("k", v1, LocalHit)
			for _, opts := range []store.PutOptions{{IfMatch: "0123"}, {IfNoneMatch: "*"}, {IfNoneMatch: res.ETag}} {
				if _, err := put(v2, opts); !errors.Is(err, store.ErrPreconditionFailed) {
					t.Fatalf("Put(%+v) = %v, want ErrPreconditionFailed", opts, err)
				}
				if got, _, err := e.read("k", nil); err != nil || !bytes.Equal(got, v1) {
					t.Fatalf("after a refused Put(%+v): read err %v, v1 %v", opts, err, bytes.Equal(got, v1))
				}
			}
			if _, err := put(v2, store.PutOptions{IfMatch: res.ETag}); err != nil {
				t.Fatal(err)
			}
			if got, _, err := e.read("k", nil); err != nil || !bytes.Equal(got, v2) {
				t.Fatalf("after a matching If-Match: read err %v, v2 %v", err, bytes.Equal(got, v2))
			}
		})
	}
}

// TestChangeInvalidates: a change the store makes on a request passed
// through (Change) drops the cached copy, so even a cachelet that trusts
// its memory (ReadLocal) reads the store's new bytes afterwards; a fill
// in flight during the change never lands.
func TestChangeInvalidates(t *testing.T) {
	e := newEnv(t, readLocal)
	v1, v2 := object("k", 1, 5000), object("k", 2, 5000)
	e.storePut("k", v1)
	e.mustRead("k", v1, LocalMiss)
	e.settle()
	e.mustRead("k", v1, LocalHit)
	err := e.c.Change(t.Context(), testBucket, []string{"k", "other"}, ChangeOther, func() error {
		e.storePut("k", v2) // what the store did on the passed request
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	e.mustRead("k", v2, LocalMiss)

	// The operation's own error is returned; the keys are dropped anyway.
	e.settle()
	e.mustRead("k", v2, LocalHit)
	boom := errors.New("boom")
	if err := e.c.Change(t.Context(), testBucket, []string{"k"}, ChangeOther, func() error { return boom }); !errors.Is(err, boom) {
		t.Errorf("Change = %v, want the operation's error", err)
	}
	e.mustRead("k", v2, LocalMiss)
}

// TestChangeCountsObjectWrites: a change that writes an object (a copy,
// a completion, a PUT passed through) counts as a client's write, as its
// typed call does; other changes and failed ones do not.
func TestChangeCountsObjectWrites(t *testing.T) {
	e := newEnv(t, readLocal)
	ok := func() error { return nil }
	for _, tc := range []struct {
		kind ChangeKind
		op   func() error
		want int64
	}{
		{ChangeCopy, ok, 1},
		{ChangeComplete, ok, 1},
		{ChangePut, ok, 1},
		{ChangePut, func() error { return errors.New("refused") }, 0},
		{ChangeDelete, ok, 0},
		{ChangeOther, ok, 0},
	} {
		before := e.c.Counters().Writes
		_ = e.c.Change(t.Context(), testBucket, []string{"k"}, tc.kind, tc.op)
		if got := e.c.Counters().Writes - before; got != tc.want {
			t.Errorf("%s: %d writes counted, want %d", tc.kind, got, tc.want)
		}
	}
}

// TestSettleDeliversQueuedWrites: before a read straight from the store
// (a request passed through), Settle has the writes still queued land;
// while the store is down it fails rather than let the read miss them.
func TestSettleDeliversQueuedWrites(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.WriteTarget = WriteLocal })
	ctx := t.Context()
	e.st.SetDown(true)
	data := object("k", 1, 1000)
	if _, err := e.c.Put(ctx, testBucket, "k", bytes.NewReader(data), int64(len(data)), store.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if err := e.c.Settle(short, testBucket, "k"); err == nil {
		t.Fatal("Settle succeeded with the store down and the write queued")
	}
	e.st.SetDown(false)
	if err := e.c.Settle(ctx, testBucket, "k"); err != nil {
		t.Fatal(err)
	}
	body, _, _, err := e.st.Get(ctx, testBucket, "k", store.GetOptions{})
	if err != nil {
		t.Fatalf("the store lacks the write after Settle: %v", err)
	}
	got, _ := io.ReadAll(body)
	body.Close()
	if !bytes.Equal(got, data) {
		t.Error("the store holds other bytes after Settle")
	}
}
