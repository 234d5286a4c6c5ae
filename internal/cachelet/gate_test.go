package cachelet

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"
	"testing/synctest"

	"github.com/hoard-io/hoard/internal/store"
)

// A gate lets requests hold at most its bound; one waits until another
// gives its bytes back, or until its context ends; one larger than the
// bound passes alone.
func TestByteGate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newByteGate(100)
		ctx := context.Background()
		if err := g.acquire(ctx, 60); err != nil {
			t.Fatal(err)
		}
		got := make(chan error, 1)
		go func() { got <- g.acquire(ctx, 50) }()
		synctest.Wait() // it waits, or it is through
		select {
		case err := <-got:
			t.Fatalf("60 + 50 of 100 bytes went through: %v", err)
		default:
		}
		g.release(60)
		if err := <-got; err != nil {
			t.Fatalf("after the release: %v", err)
		}
		short, cancel := context.WithCancel(ctx)
		waited := make(chan error, 1)
		go func() { waited <- g.acquire(short, 60) }()
		synctest.Wait()
		cancel()
		if err := <-waited; !errors.Is(err, context.Canceled) {
			t.Fatalf("a cancelled wait: %v", err)
		}
		g.release(50)
		if err := g.acquire(ctx, 500); err != nil { // alone: it passes
			t.Fatal(err)
		}
		if g.used != 500 {
			t.Fatalf("used %d, want 500", g.used)
		}
	})
}

// Buffered writes hold at most the upload reserve (or the largest object)
// in bodies at once: a write that finds no room waits, here until its
// context ends.
func TestBufferedWritesAreBounded(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.WriteTarget, c.WriteMode, c.ReadMode = WriteLocal, WriteAsync, ReadLocal })
	room := max(e.c.cfg.Cache.MaxUploadReserve, e.c.cfg.Cache.MaxObjectSize)
	first := object("a", 1, int(room*3/4))
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		_, err := e.c.Put(t.Context(), testBucket, "a", pr, int64(len(first)), store.PutOptions{})
		done <- err
	}()
	if _, err := pw.Write(first[:1]); err != nil { // read: the first write holds its room
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	second := object("b", 1, int(room/2))
	if _, err := e.c.Put(ctx, testBucket, "b", bytes.NewReader(second), int64(len(second)), store.PutOptions{}); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("a write past the room: %v, want it to wait (and give up with its context)", err)
	}
	if _, err := pw.Write(first[1:]); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.Put(t.Context(), testBucket, "b", bytes.NewReader(second), int64(len(second)), store.PutOptions{}); err != nil {
		t.Fatalf("once the room is back: %v", err)
	}
	e.mustRead("a", first, LocalHit)
	e.mustRead("b", second, LocalHit)
}
