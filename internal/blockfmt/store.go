package blockfmt

import (
	"context"
	"fmt"
	"io"

	"github.com/hoard-io/hoard/internal/store"
)

// storeSource fetches ranges of one version of an object: every Get
// carries the ETag seen when the object was opened, so an object
// overwritten while it is read fails (store.ErrPreconditionFailed)
// instead of mixing two versions.
type storeSource struct {
	st          store.Store
	bucket, key string
	etag        string
}

func (s storeSource) FetchAt(ctx context.Context, p []byte, off int64) error {
	if len(p) == 0 {
		return nil
	}
	body, _, _, err := s.st.Get(ctx, s.bucket, s.key, store.GetOptions{
		Range:   &store.ByteRange{Start: off, End: off + int64(len(p)) - 1},
		IfMatch: s.etag,
	})
	if err != nil {
		return err
	}
	defer body.Close()
	if _, err := io.ReadFull(body, p); err != nil {
		return fmt.Errorf("%s/%s: %w", s.bucket, s.key, err)
	}
	return nil
}

// OpenStore opens an object of a store (a cachelet's S3 front through an
// S3 store client, or the store itself): one Stat, one ranged Get of the
// tail, then one ranged Get per run of blocks read.
func OpenStore(ctx context.Context, st store.Store, bucket, key string, opts ...ReaderOption) (*Reader, error) {
	info, err := st.Stat(ctx, bucket, key)
	if err != nil {
		return nil, err
	}
	return NewReader(ctx, storeSource{st: st, bucket: bucket, key: key, etag: info.ETag}, info.Size, opts...)
}
