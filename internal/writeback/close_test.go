package writeback

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// TestCloseGivesUp closes a queue whose writes cannot all be persisted
// before the deadline: one key's store is down, another's Persist hangs
// until cancelled with a write queued behind it.
func TestCloseGivesUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var cancelled sync.WaitGroup
		cancelled.Add(1)
		sink := sinkFunc(func(ctx context.Context, w Write) error {
			switch string(w.Data) {
			case "a":
				return errDown
			case "b1":
				<-ctx.Done()
				cancelled.Done()
				return ctx.Err()
			}
			return nil
		})
		var logs bytes.Buffer
		q := newQueue(t, Config{
			Sink:    sink,
			Workers: 2,
			Logger:  slog.New(slog.NewTextHandler(&logs, nil)),
		})
		ca := q.Enqueue(put("a", "a"))
		cb1 := q.Enqueue(put("b", "b1"))
		synctest.Wait() // b1 in progress, a waiting for a retry
		cb2 := q.Enqueue(put("b", "b2"))
		cc := q.Enqueue(put("c", "c"))
		synctest.Wait()
		wantOutcome(t, "c", cc, nil)

		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		start := time.Now()
		err := q.Close(ctx)
		if waited := time.Since(start); waited != 10*time.Second {
			t.Errorf("Close returned after %v, want at its deadline (10s)", waited)
		}
		cancelled.Wait() // the hanging Persist saw its context cancelled

		var ce *CloseError
		if !errors.As(err, &ce) {
			t.Fatalf("Close = %v, want a *CloseError", err)
		}
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Close = %v, want it to wrap the deadline", err)
		}
		var got []string
		for _, w := range ce.Unpersisted {
			got = append(got, w.Key+"="+string(w.Data))
		}
		if want := "a=a b=b1 b=b2"; strings.Join(got, " ") != want {
			t.Errorf("Unpersisted = %v, want %s", got, want)
		}
		for _, s := range []string{"b/a", "b/b"} {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("Close error %q does not name %s", err, s)
			}
		}
		wantOutcome(t, "a", ca, ErrClosed)
		if err := <-q.Enqueue(put("a", "again")); !errors.Is(err, ErrClosed) {
			t.Errorf("Enqueue after Close = %v, want ErrClosed", err)
		}
		wantOutcome(t, "b1", cb1, ErrClosed)
		wantOutcome(t, "b2", cb2, ErrClosed)

		for _, key := range []string{"key=a", "key=b"} {
			if !strings.Contains(logs.String(), key) {
				t.Errorf("log does not name %s:\n%s", key, logs.String())
			}
		}
		s := q.Stats()
		if s.Depth != 0 || s.OldestAge != 0 || s.Failed != 3 || s.Persisted != 1 || s.Retries == 0 {
			t.Errorf("Stats = %+v, want Depth 0, Failed 3, Persisted 1, some retries", s)
		}
		if err2 := q.Close(context.Background()); err2 != err {
			t.Errorf("second Close = %v, want the first's %v", err2, err)
		}
	})
}

func TestCloseExpiredContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		attempts := 0
		sink := sinkFunc(func(ctx context.Context, w Write) error {
			attempts++
			return errDown
		})
		q := newQueue(t, Config{Sink: sink, Workers: 1})
		ca := q.Enqueue(put("a", "a"))
		synctest.Wait() // a failed once and waits for a retry
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		err := q.Close(ctx)
		var ce *CloseError
		if !errors.As(err, &ce) || len(ce.Unpersisted) != 1 || ce.Unpersisted[0].Key != "a" {
			t.Fatalf("Close = %v, want a *CloseError naming a", err)
		}
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Close = %v, want it to wrap context.Canceled", err)
		}
		err = <-ca
		if !errors.Is(err, ErrClosed) || !errors.Is(err, errDown) {
			t.Errorf("outcome %v, want ErrClosed wrapping the last error %v", err, errDown)
		}
		time.Sleep(time.Hour)
		if attempts != 1 {
			t.Errorf("%d attempts, want no retry after Close", attempts)
		}
	})
}
