package peer

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net/http"
	"net/url"
	"strconv"

	"github.com/hoard-io/hoard/internal/store"
)

// Erasure-coded shards (internal/erasure, ADR 23): a cachelet stores,
// serves and drops the shards of large objects that it holds for its
// application. A shard travels with its manifest (erasure.Manifest, encoded)
// in a signed header; the receiver checks the bytes against it.

// ShardHolder is implemented by Owners that hold erasure-coded shards for
// their peers (the cachelet does). Called concurrently.
type ShardHolder interface {
	// PeerShardPut keeps shard index of bucket/key at version etag: body
	// holds exactly size bytes (Read fails on a body that arrived damaged
	// or short), manifest is the object's encoded manifest. The shard is
	// kept only if every piece matches the manifest. Errors: ErrBadRequest
	// for a shard that does not verify, store.ErrUnavailable when it does
	// not fit.
	PeerShardPut(ctx context.Context, bucket, key, etag string, index int, manifest string, body io.Reader, size int64) error
	// PeerShard returns the shard this cachelet holds of bucket/key at
	// etag: its index, encoded manifest and pieces [first, end) (end -1:
	// to the last). The bytes are the holder's and must not be modified.
	// store.ErrNoSuchKey when it holds none.
	PeerShard(ctx context.Context, bucket, key, etag string, first, end int) (index int, manifest string, pieces []byte, err error)
	// PeerShardDelete drops the shards of bucket/key at version etag (""
	// drops every version).
	PeerShardDelete(ctx context.Context, bucket, key, etag string)
}

// ShardBackupHolder is implemented by ShardHolders that keep backups of
// their peers' shards (the cachelet does): a shard PUT naming an origin
// ("backup" in the query) is a backup of a shard the origin holds, kept
// apart from the holder's own shards.
type ShardBackupHolder interface {
	// PeerShardBackup keeps a backup of shard index of bucket/key at etag
	// held by the member at peer address origin; as PeerShardPut.
	PeerShardBackup(ctx context.Context, origin, bucket, key, etag string, index int, manifest string, body io.Reader, size int64) error
	// PeerShardBackupDrop drops the backups this holder keeps for origin
	// of shard index of bucket/key at etag (index -1: every index; etag
	// "": every version); with bucket and key "", every backup of origin.
	// A shard DELETE naming an origin ("backup" in the query) is one.
	PeerShardBackupDrop(ctx context.Context, origin, bucket, key, etag string, index int)
}

// MaxShardBytes bounds one shard written to a peer.
const MaxShardBytes = 1 << 30

func shardQuery(bucket, key, etag string, extra ...string) string {
	q := url.Values{}
	q.Set("bucket", bucket)
	q.Set("key", key)
	q.Set("etag", etag)
	for i := 0; i+1 < len(extra); i += 2 {
		q.Set(extra[i], extra[i+1])
	}
	return q.Encode()
}

// serveShard answers the three shard requests.
func (s *Server) serveShard(a answer, r *http.Request) {
	h, ok := s.owner.(ShardHolder)
	if !ok {
		a.error(fmt.Errorf("%w: this cachelet holds no shards", ErrBadRequest))
		return
	}
	q := r.URL.Query()
	bucket, key, etag := q.Get("bucket"), q.Get("key"), q.Get("etag")
	if origin := q.Get("backup"); origin != "" && r.Method == http.MethodDelete {
		b, ok := h.(ShardBackupHolder)
		if !ok {
			a.error(fmt.Errorf("%w: this cachelet keeps no backups", ErrBadRequest))
			return
		}
		index := -1
		if v := q.Get("index"); v != "" {
			var err error
			if index, err = strconv.Atoi(v); err != nil || index < 0 {
				index = -2
			}
		}
		if (bucket == "") != (key == "") || (bucket == "" && (etag != "" || index != -1)) || index < -1 {
			a.error(fmt.Errorf("%w: a backup drop names bucket and key (and maybe etag and index >= 0), or neither", ErrBadRequest))
			return
		}
		b.PeerShardBackupDrop(r.Context(), origin, bucket, key, etag, index)
		a.whole(http.StatusNoContent, nil)
		return
	}
	if bucket == "" || key == "" || (etag == "" && r.Method != http.MethodDelete) {
		a.error(fmt.Errorf("%w: a shard needs bucket, key and etag", ErrBadRequest))
		return
	}
	switch r.Method {
	case http.MethodPut:
		index, err1 := strconv.Atoi(q.Get("index"))
		size, err2 := strconv.ParseInt(r.Header.Get(hdrSize), 10, 64)
		if err1 != nil || err2 != nil || index < 0 || size < 0 || size > MaxShardBytes {
			a.error(fmt.Errorf("%w: a shard needs index >= 0 and a size up to %d", ErrBadRequest, MaxShardBytes))
			return
		}
		body := &trailerChecked{r: r.Body, req: r, remaining: size, crc: crc32.New(castagnoli)}
		put := h.PeerShardPut
		if origin := q.Get("backup"); origin != "" {
			b, ok := h.(ShardBackupHolder)
			if !ok {
				a.error(fmt.Errorf("%w: this cachelet keeps no backups", ErrBadRequest))
				return
			}
			put = func(ctx context.Context, bucket, key, etag string, index int, manifest string, body io.Reader, size int64) error {
				return b.PeerShardBackup(ctx, origin, bucket, key, etag, index, manifest, body, size)
			}
		}
		if err := put(r.Context(), bucket, key, etag, index, r.Header.Get(hdrManifest), body, size); err != nil {
			if body.err != nil {
				err = body.err
			}
			a.error(err)
			return
		}
		a.whole(http.StatusNoContent, nil)
	case http.MethodGet:
		first, err1 := strconv.Atoi(q.Get("first"))
		end, err2 := strconv.Atoi(q.Get("end"))
		if err1 != nil || err2 != nil || first < 0 || (end >= 0 && end < first) || end < -1 {
			a.error(fmt.Errorf("%w: a shard read needs 0 <= first <= end (or end -1)", ErrBadRequest))
			return
		}
		index, manifest, pieces, err := h.PeerShard(r.Context(), bucket, key, etag, first, end)
		if err != nil {
			a.error(err)
			return
		}
		a.w.Header().Set(hdrManifest, manifest)
		a.w.Header().Set(hdrIndex, strconv.Itoa(index))
		a.w.Header().Set("Content-Type", "application/octet-stream")
		sw := a.stream(int64(len(pieces)))
		_, err = sw.Write(pieces)
		if err == nil {
			_, err = sw.finish()
		}
		if err != nil {
			s.log.Debug("peer shard answer aborted mid-body", "bucket", bucket, "key", key, "err", err)
			panic(http.ErrAbortHandler) // headers are out: a short body is the signal
		}
	case http.MethodDelete:
		h.PeerShardDelete(r.Context(), bucket, key, etag)
		a.whole(http.StatusNoContent, nil)
	default:
		a.error(ErrBadRequest)
	}
}

// ShardPut stores shard index of bucket/key at version etag on the
// cachelet at addr: body holds exactly size bytes and streams with a
// CRC32C trailer; manifest is the object's encoded manifest, against which
// the holder checks every piece before it keeps the shard.
func (c *Client) ShardPut(ctx context.Context, addr, bucket, key, etag string, index int, manifest string, body io.Reader, size int64) error {
	return c.shardPut(ctx, addr, "", bucket, key, etag, index, manifest, body, size)
}

// ShardBackup stores a backup of shard index of bucket/key at etag, which
// the member at peer address origin holds, on the cachelet at addr; as
// ShardPut.
func (c *Client) ShardBackup(ctx context.Context, addr, origin, bucket, key, etag string, index int, manifest string, body io.Reader, size int64) error {
	if origin == "" {
		return fmt.Errorf("%w: a backup needs its origin", ErrBadRequest)
	}
	return c.shardPut(ctx, addr, origin, bucket, key, etag, index, manifest, body, size)
}

func (c *Client) shardPut(ctx context.Context, addr, origin, bucket, key, etag string, index int, manifest string, body io.Reader, size int64) error {
	extra := []string{"index", strconv.Itoa(index)}
	if origin != "" {
		extra = append(extra, "backup", origin)
	}
	return c.putStreamed(ctx, addr, "/v1/shard?"+shardQuery(bucket, key, etag, extra...), body, size, hdrManifest, manifest)
}

// putStreamed PUTs size bytes of body to path at addr, chunked with a
// CRC32C trailer, with the header name set to value beside the size; a
// 204 is success.
func (c *Client) putStreamed(ctx context.Context, addr, path string, body io.Reader, size int64, name, value string) error {
	cb := &crcBody{r: body, crc: crc32.New(castagnoli)}
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, c.scheme+addr+path, cb)
	if err != nil {
		return err
	}
	req.ContentLength = -1 // chunked, so the trailer can follow
	req.Trailer = http.Header{hdrCRC: nil}
	cb.req = req
	req.Header.Set(hdrSize, strconv.FormatInt(size, 10))
	req.Header.Set(name, value)
	resp, err := c.do(c.http, req, addr)
	if err != nil {
		if cb.err != nil {
			return cb.err
		}
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		return readError(resp)
	}
	return nil
}

// Shard is a peer's answer to ShardGet.
type Shard struct {
	// Index is which shard of the object the peer holds.
	Index int
	// Manifest is the object's encoded manifest, as the peer holds it;
	// the caller checks the pieces against it (and it against the other
	// shards').
	Manifest string
	// Body holds the pieces asked for; its Read fails before the last
	// bytes when they do not match the answer's MAC. The caller closes it.
	Body io.ReadCloser
	// Size is the bytes in Body.
	Size int64
}

// ShardGet asks the cachelet at addr for pieces [first, end) of the shard
// it holds of bucket/key at version etag (end -1: to the last; first ==
// end: none, only which shard it holds). Errors: store.ErrNoSuchKey when
// it holds none, ErrAnswerUnauthenticated, store.ErrUnavailable.
func (c *Client) ShardGet(ctx context.Context, addr, bucket, key, etag string, first, end int) (*Shard, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet,
		c.scheme+addr+"/v1/shard?"+shardQuery(bucket, key, etag, "first", strconv.Itoa(first), "end", strconv.Itoa(end)), nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.do(c.get, req, addr)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		return nil, readError(resp)
	}
	index, err := strconv.Atoi(resp.Header.Get(hdrIndex))
	size := resp.ContentLength - bodyMACLen
	if err != nil || index < 0 || size < 0 {
		resp.Body.Close()
		return nil, fmt.Errorf("%w: peer %s: bad shard answer", store.ErrUnavailable, addr)
	}
	body, err := c.streamed(resp, addr, size, "shard")
	if err != nil {
		return nil, err
	}
	if size == 0 {
		if _, err := body.Read(nil); !errors.Is(err, io.EOF) {
			body.Close()
			return nil, err
		}
	}
	return &Shard{Index: index, Manifest: resp.Header.Get(hdrManifest), Body: body, Size: size}, nil
}

// ShardDelete asks the cachelet at addr to drop its shards of bucket/key
// at version etag ("": of every version).
func (c *Client) ShardDelete(ctx context.Context, addr, bucket, key, etag string) error {
	return c.shardDelete(ctx, addr, shardQuery(bucket, key, etag))
}

// ShardBackupDrop asks the cachelet at addr to drop the backups it keeps
// for the member at peer address origin of shard index of bucket/key at
// version etag (index -1: every index; etag "": every version); with
// bucket and key "", every backup of origin.
func (c *Client) ShardBackupDrop(ctx context.Context, addr, origin, bucket, key, etag string, index int) error {
	if origin == "" || (bucket == "") != (key == "") || (bucket == "" && (etag != "" || index != -1)) || index < -1 {
		return fmt.Errorf("%w: a backup drop needs its origin, and bucket and key or neither", ErrBadRequest)
	}
	extra := []string{"backup", origin}
	if index >= 0 {
		extra = append(extra, "index", strconv.Itoa(index))
	}
	return c.shardDelete(ctx, addr, shardQuery(bucket, key, etag, extra...))
}

func (c *Client) shardDelete(ctx context.Context, addr, query string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodDelete,
		c.scheme+addr+"/v1/shard?"+query, nil)
	if err != nil {
		return err
	}
	resp, err := c.do(c.http, req, addr)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		return readError(resp)
	}
	return nil
}
