package cachelet

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hoard-io/hoard/internal/store"
	"github.com/hoard-io/hoard/internal/store/memstore"
)

// warm caches key with data and zeroes the store's counts.
func (e *env) warm(key string, data []byte) {
	e.t.Helper()
	e.storePut(key, data)
	e.mustRead(key, data, LocalMiss)
	e.settle()
	e.st.ResetCounts()
}

// readResult is one concurrent read's outcome.
type readResult struct {
	data    []byte
	outcome Outcome
	err     error
}

// goRead starts a read of key with ctx; its result arrives on the channel.
func (e *env) goRead(ctx context.Context, wg *sync.WaitGroup, key string) <-chan readResult {
	out := make(chan readResult, 1)
	wg.Go(func() {
		got, obj, err := readWith(ctx, e.c, key, nil)
		r := readResult{data: got, err: err}
		if obj != nil {
			r.outcome = obj.Outcome
		}
		out <- r
	})
	return out
}

func (e *env) validationJoins() float64 { return toFloat64(e.c.m.validationJoins) }

// N readers of a cached key that arrive while one validation is on the
// wire share the next one: two conditional GETs in all, every read a
// local hit of the right bytes.
func TestSharedValidationBatches(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const readers = 16
		e := newEnv(t, nil)
		data := object("k", 1, 8<<10)
		e.warm("k", data)
		hold := e.st.HoldGet(testBucket, "k")

		var wg sync.WaitGroup
		first := e.goRead(t.Context(), &wg, "k")
		<-hold.Reached() // the first validation is on the wire, held
		var rest []<-chan readResult
		for range readers - 1 {
			rest = append(rest, e.goRead(t.Context(), &wg, "k"))
		}
		synctest.Wait() // every later reader waits for the pending validation
		if g := e.st.GetCounts(); g.Total != 1 {
			t.Fatalf("%d store Gets while the first is held, want 1", g.Total)
		}
		if j := e.validationJoins(); j != readers-1 {
			t.Fatalf("validation joins = %v, want %d", j, readers-1)
		}
		hold.Release()
		wg.Wait()
		for i, ch := range append(rest, first) {
			r := <-ch
			if r.err != nil || !bytes.Equal(r.data, data) || r.outcome != LocalHit {
				t.Errorf("reader %d: %d bytes, %s, %v", i, len(r.data), r.outcome, r.err)
			}
		}
		e.wantGets(memstore.GetCounts{Total: 2, Conditional: 2, NotModified: 2})
		if v := e.validations("fresh"); v != 2 {
			t.Errorf("validations{fresh} = %v, want 2", v)
		}
	})
}

// A read that begins after a validation was sent is not answered by it:
// the object changed behind hoard's back after the store judged the first
// validation, and the later read, which began after the change completed,
// waits for the next validation and sees the new version.
func TestValidationSentBeforeReadIsNotShared(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, nil)
		v1, v2 := object("k", 1, 8<<10), object("k", 2, 8<<10)
		e.warm("k", v1)
		hold := e.st.HoldGet(testBucket, "k")

		var wg sync.WaitGroup
		first := e.goRead(t.Context(), &wg, "k")
		<-hold.Reached() // judged: v1 is current, answer held
		e.storePut("k", v2)
		second := e.goRead(t.Context(), &wg, "k") // began after the change completed
		synctest.Wait()
		if j := e.validationJoins(); j != 1 {
			t.Fatalf("validation joins = %v, want 1 (the second read waits for the next validation)", j)
		}
		hold.Release()
		wg.Wait()

		if r := <-first; r.err != nil || !bytes.Equal(r.data, v1) {
			t.Errorf("first read: v1? %v, %v", bytes.Equal(r.data, v1), r.err)
		}
		if r := <-second; r.err != nil || !bytes.Equal(r.data, v2) || r.outcome != LocalMiss {
			t.Errorf("second read: v2? %v, %s, %v", bytes.Equal(r.data, v2), r.outcome, r.err)
		}
		if g := e.st.GetCounts(); g.FullBodies != 1 || g.NotModified != 1 {
			t.Errorf("store Gets %+v, want one 304 (first) and one full body (second)", g)
		}
	})
}

// The same for a validation that reads share: once it is on the wire, a
// read that begins is not answered by it, even though readers of it are
// still waiting.
func TestSharedValidationOnTheWireIsNotJoined(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, nil)
		v1, v2 := object("k", 1, 8<<10), object("k", 2, 8<<10)
		e.warm("k", v1)
		hold1 := e.st.HoldGet(testBucket, "k")

		var wg sync.WaitGroup
		first := e.goRead(t.Context(), &wg, "k")
		<-hold1.Reached() // the first reader's own validation
		hold2 := e.st.HoldGet(testBucket, "k")
		second := e.goRead(t.Context(), &wg, "k")
		synctest.Wait() // the second waits for the next validation
		hold1.Release()
		<-hold2.Reached() // the shared validation is on the wire: judged, v1 current
		e.storePut("k", v2)
		third := e.goRead(t.Context(), &wg, "k") // began after the change completed
		synctest.Wait()
		hold2.Release()
		wg.Wait()

		for i, ch := range []<-chan readResult{first, second} {
			if r := <-ch; r.err != nil || !bytes.Equal(r.data, v1) {
				t.Errorf("reader %d: v1? %v, %v", i, bytes.Equal(r.data, v1), r.err)
			}
		}
		if r := <-third; r.err != nil || !bytes.Equal(r.data, v2) {
			t.Errorf("third read (after the change): v2? %v, %s, %v", bytes.Equal(r.data, v2), r.outcome, r.err)
		}
	})
}

// A validation that finds the object changed installs the new version
// once; the reads waiting behind it start over and find it: one download
// for every reader, all of them served the new bytes.
func TestSharedValidationChangedRefillsOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const readers = 12
		e := newEnv(t, nil)
		v1, v2 := object("k", 1, 8<<10), object("k", 2, 8<<10)
		e.warm("k", v1)
		e.storePut("k", v2) // behind hoard's back
		hold := e.st.HoldGet(testBucket, "k")

		var wg sync.WaitGroup
		var chans []<-chan readResult
		chans = append(chans, e.goRead(t.Context(), &wg, "k"))
		<-hold.Reached() // judged: changed, v2's body held
		for range readers - 1 {
			chans = append(chans, e.goRead(t.Context(), &wg, "k"))
		}
		synctest.Wait()
		hold.Release()
		wg.Wait()
		for i, ch := range chans {
			if r := <-ch; r.err != nil || !bytes.Equal(r.data, v2) {
				t.Errorf("reader %d: v2? %v, %s, %v", i, bytes.Equal(r.data, v2), r.outcome, r.err)
			}
		}
		e.settle()
		if g := e.st.GetCounts(); g.FullBodies != 1 {
			t.Errorf("store Gets %+v, want one full body", g)
		}
		if v := e.validations("changed"); v != 1 {
			t.Errorf("validations{changed} = %v, want 1", v)
		}
		e.mustRead("k", v2, LocalHit)
	})
}

// A validation that fails fails every read that shared it: nothing is
// served unconfirmed, unless ServeStaleIfError asks for stale hits.
func TestSharedValidationFailureFailsJoiners(t *testing.T) {
	for _, stale := range []bool{false, true} {
		name := "fail"
		if stale {
			name = "serve-stale"
		}
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				const readers = 8
				e := newEnv(t, func(c *Config) { c.ServeStaleIfError = stale })
				data := object("k", 1, 8<<10)
				e.warm("k", data)
				hold := e.st.HoldGet(testBucket, "k")

				var wg sync.WaitGroup
				first := e.goRead(t.Context(), &wg, "k")
				<-hold.Reached() // judged while up: 304
				e.st.SetDown(true)
				var rest []<-chan readResult
				for range readers - 1 {
					rest = append(rest, e.goRead(t.Context(), &wg, "k"))
				}
				synctest.Wait()
				hold.Release()
				wg.Wait()
				if r := <-first; r.err != nil || r.outcome != LocalHit {
					t.Errorf("first read (judged while the store was up): %s, %v", r.outcome, r.err)
				}
				for i, ch := range rest {
					r := <-ch
					switch {
					case stale && (r.err != nil || r.outcome != StaleHit || !bytes.Equal(r.data, data)):
						t.Errorf("reader %d: %s, %v, want a stale hit", i, r.outcome, r.err)
					case !stale && !errors.Is(r.err, store.ErrUnavailable):
						t.Errorf("reader %d: %s, %v, want ErrUnavailable", i, r.outcome, r.err)
					}
				}
				if v := e.validations("error"); v != 1 {
					t.Errorf("validations{error} = %v, want 1 (shared)", v)
				}
			})
		})
	}
}

// A reader that gives up leaves at once; the others still get their
// answer. When every reader of the validation on the wire has left, the
// request is cancelled (else the held Get would never end and the
// cachelet's goroutines would not either).
func TestSharedValidationCancellation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, nil)
		data := object("k", 1, 8<<10)
		e.warm("k", data)
		hold := e.st.HoldGet(testBucket, "k")

		var wg sync.WaitGroup
		first := e.goRead(t.Context(), &wg, "k")
		<-hold.Reached()
		ctx, cancel := context.WithCancel(t.Context())
		quitter := e.goRead(ctx, &wg, "k")
		stayer := e.goRead(t.Context(), &wg, "k")
		synctest.Wait()
		cancel()
		if r := <-quitter; !errors.Is(r.err, context.Canceled) {
			t.Errorf("cancelled reader: %s, %v, want context.Canceled", r.outcome, r.err)
		}
		hold.Release()
		wg.Wait()
		for _, ch := range []<-chan readResult{first, stayer} {
			if r := <-ch; r.err != nil || r.outcome != LocalHit {
				t.Errorf("reader: %s, %v", r.outcome, r.err)
			}
		}

		// A lone reader that gives up cancels its own request.
		hold = e.st.HoldGet(testBucket, "k")
		defer hold.Release()
		ctx, cancel = context.WithCancel(t.Context())
		alone := e.goRead(ctx, &wg, "k")
		<-hold.Reached()
		cancel()
		if r := <-alone; !errors.Is(r.err, context.Canceled) {
			t.Errorf("lone reader: %v, want context.Canceled", r.err)
		}
		hold.Release()

		// Every reader of a shared validation on the wire leaves: its
		// request is cancelled (else the held Get, released only at the
		// end, would keep the cachelet's goroutine, and settle, waiting).
		hold1 := e.st.HoldGet(testBucket, "k")
		head := e.goRead(t.Context(), &wg, "k")
		<-hold1.Reached()
		hold2 := e.st.HoldGet(testBucket, "k")
		defer hold2.Release()
		ctx, cancel = context.WithCancel(t.Context())
		b, c := e.goRead(ctx, &wg, "k"), e.goRead(ctx, &wg, "k")
		synctest.Wait() // both wait for the pending validation
		hold1.Release()
		<-hold2.Reached() // the shared validation is on the wire, held
		if r := <-head; r.err != nil || r.outcome != LocalHit {
			t.Errorf("first reader: %s, %v", r.outcome, r.err)
		}
		cancel()
		left := time.Now()
		for _, ch := range []<-chan readResult{b, c} {
			if r := <-ch; !errors.Is(r.err, context.Canceled) {
				t.Errorf("sharer: %v, want context.Canceled", r.err)
			}
		}
		e.settle() // the shared validation's goroutine ended with its request
		// In the bubble, time moves only when everything waits: had the
		// request not been cancelled, it would have ended at its fill
		// timeout, minutes later.
		if waited := time.Since(left); waited != 0 {
			t.Errorf("the abandoned validation ended %v after its readers left, not at once", waited)
		}
		e.c.valMu.Lock()
		n := len(e.c.vals.slots)
		e.c.valMu.Unlock()
		if n != 0 {
			t.Errorf("%d validation slots left", n)
		}
	})
}
