package blockfmt

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/hoard-io/hoard/internal/store"
	"github.com/hoard-io/hoard/internal/store/memstore"
)

// countingStore counts the bytes its Gets return.
type countingStore struct {
	store.Store
	gets  int
	bytes int64
}

func (c *countingStore) Get(ctx context.Context, bucket, key string, opts store.GetOptions) (io.ReadCloser, store.ObjectInfo, *store.ByteRange, error) {
	body, info, rng, err := c.Store.Get(ctx, bucket, key, opts)
	if err != nil {
		return nil, info, rng, err
	}
	c.gets++
	data, err := io.ReadAll(body)
	body.Close()
	c.bytes += int64(len(data))
	return io.NopCloser(bytes.NewReader(data)), info, rng, err
}

func TestOpenStoreFetchesOnlyCoveringBlocks(t *testing.T) {
	ctx := context.Background()
	data := payload(64*4096, 8)
	obj := pack(t, data, WithBlockSize(4096))
	mem := memstore.New()
	if err := mem.CreateBucket(ctx, "models", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := mem.Put(ctx, "models", "m.blk", bytes.NewReader(obj), int64(len(obj)), store.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	st := &countingStore{Store: mem}
	r, err := OpenStore(ctx, st, "models", "m.blk")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	p := make([]byte, 100)
	if _, err := r.ReadAt(p, 30*4096+10); err != nil || !bytes.Equal(p, data[30*4096+10:30*4096+110]) {
		t.Fatalf("ReadAt: %v", err)
	}
	if want := min(int64(len(obj)), 64<<10) + int64(r.lengths[30]&^storedBit); st.gets != 2 || st.bytes != want {
		t.Fatalf("%d Gets of %d bytes, want 2 of %d (the tail, one block)", st.gets, st.bytes, want)
	}
	// Overwritten while open: the next block's Get fails, never mixes.
	if _, err := mem.Put(ctx, "models", "m.blk", strings.NewReader("new"), 3, store.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.ReadAt(p, 0); !errors.Is(err, store.ErrPreconditionFailed) {
		t.Fatalf("read after an overwrite: %v", err)
	}
}
