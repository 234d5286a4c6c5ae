package disktier

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/hoard-io/hoard/internal/store"
)

// versioned is the bytes of version v of key: every read can be checked
// against the ETag it came with.
func versioned(key string, v int) []byte {
	return bytes.Repeat([]byte(fmt.Sprintf("%s@v%d;", key, v)), 700)
}

// TestSharedConcurrency: two tiers over one directory (two instances on
// a node), each with several goroutines writing new versions, spilling,
// reading and removing the same few keys, under a budget that keeps the
// cleaner busy. Every read that succeeds returns exactly the bytes of the
// version its ETag names; nothing else is ever served.
func TestSharedConcurrency(t *testing.T) {
	dir := t.TempDir()
	tiers := []*Tier{newTier(t, dir, 60_000, nil), newTier(t, dir, 60_000, nil)}
	keys := []string{"a", "b", "c", "d", "e"}
	var wg sync.WaitGroup
	var mu sync.Mutex
	hits := 0
	for w := range 6 {
		tr := tiers[w%2]
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			for i := range 300 {
				k := keys[rng.IntN(len(keys))]
				switch op := rng.IntN(10); {
				case op < 3:
					v := rng.IntN(50)
					d := versioned(k, v)
					inf := store.ObjectInfo{Size: int64(len(d)), ETag: fmt.Sprintf("v%d", v)}
					if op == 0 {
						tr.Spill("b", k, inf, io.NopCloser(bytes.NewReader(d)))
					} else {
						_ = tr.Write(context.Background(), "b", k, inf, io.NopCloser(bytes.NewReader(d)))
					}
				case op == 3:
					tr.Remove("b", k)
				case op == 4 && i%50 == 0:
					tr.clean()
				default:
					inf, body, err := tr.Open("b", k)
					if errors.Is(err, ErrNotFound) {
						continue
					}
					if err != nil {
						t.Errorf("open %s: %v", k, err)
						return
					}
					got, err := io.ReadAll(body)
					body.Close()
					if err != nil {
						continue // removed or replaced under the stream: an error, never bytes
					}
					var v int
					fmt.Sscanf(inf.ETag, "v%d", &v)
					if !bytes.Equal(got, versioned(k, v)) {
						t.Errorf("%s %s: wrong bytes", k, inf.ETag)
						return
					}
					mu.Lock()
					hits++
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	for _, tr := range tiers {
		tr.Settle()
		tr.clean()
		if s := tr.Stats(); s.Bytes > 60_000 {
			t.Errorf("after a rescan: %+v over the budget", s)
		}
	}
	if hits == 0 {
		t.Error("no read found a file")
	}
}
