package cachelet

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/hoard-io/hoard/internal/cache"
	"github.com/hoard-io/hoard/internal/store"
	"github.com/prometheus/client_golang/prometheus"
)

// Shadows (Config.Shadow, ADR 0030, amendment "shadows"): OFC's
// placeholder of a pending write. Under durable writes, once a write is
// logged (and, replicated, kept by its backup) and before it is
// acknowledged, the cachelet puts at its key an empty object whose user
// metadata names the write's version (its ETag, the body's MD5) and its
// sequence (its log ID, or its backup sequence), conditional on the
// store holding a version of the write's base, so that a newer write made
// by another route is never replaced. The store then says, to anyone who
// looks, that a newer version of the key is pending; the write's delivery
// replaces the placeholder (unconditionally, as every delivery that is
// not a replay), and a replay or a backup's takeover counts the
// placeholder of its own write (or of an earlier write of the key it was
// written over) as part of its base.
//
// A placeholder the store refuses (another route wrote the key, or the
// store did not answer) leaves the write logged and queued, acknowledged
// only once the store has it, as a write no backup took is.
//
// Readers through hoard never serve a placeholder as data: a read that
// reaches the store and finds one is a doubt (503), or, for a member that
// could not reach the key's owner under replicated writes, the backups'
// record is served (durable_read.go). Readers outside hoard see the empty
// object and its metadata until the delivery lands.
//
// A placeholder carries a MAC (HMAC-SHA256 under Config.ShadowKey, which
// the application's cachelets share) over its bucket, key, pending
// version and sequence. Only an object whose MAC verifies is one: an
// empty object a client wrote with the same metadata, through hoard or
// straight to the store, is an ordinary object, served as the store
// serves it.

// Metadata of a placeholder, without the x-amz-meta- prefix.
const (
	shadowPendingMeta = "hoard-pending"
	shadowSeqMeta     = "hoard-pending-seq"
	shadowMACMeta     = "hoard-pending-mac"
)

// MinShadowKey is the shortest Config.ShadowKey.
const MinShadowKey = 16

// maxShadowTries bounds the HEAD-then-put rounds of one placeholder.
const maxShadowTries = 3

// errPendingInStore: a read found a placeholder in the store.
var errPendingInStore = fmt.Errorf("%w: the store holds a placeholder of a write not yet delivered", store.ErrUnavailable)

// shadowMAC is the hex MAC of a placeholder of bucket/object naming
// version etag and sequence seq under key: HMAC-SHA256 over a label and
// the four fields, each preceded by its length.
func shadowMAC(key []byte, bucket, object, etag, seq string) string {
	m := hmac.New(sha256.New, key)
	b := []byte("hoard placeholder v1\x00")
	for _, f := range []string{bucket, object, etag, seq} {
		b = binary.AppendUvarint(b, uint64(len(f)))
		b = append(b, f...)
	}
	m.Write(b)
	return hex.EncodeToString(m.Sum(nil))
}

// pendingOf returns the version a placeholder of k names: "" for an
// object that is not one, or whose MAC does not verify under the
// cachelet's ShadowKey (none: nothing is a placeholder).
func (c *Cachelet) pendingOf(k cache.Key, info store.ObjectInfo) string {
	return pendingUnder(c.cfg.ShadowKey, k, info)
}

func pendingUnder(key []byte, k cache.Key, info store.ObjectInfo) string {
	md := info.UserMetadata
	etag, seq, mac := md[shadowPendingMeta], md[shadowSeqMeta], md[shadowMACMeta]
	if info.Size != 0 || len(key) == 0 || etag == "" || seq == "" || mac == "" {
		return ""
	}
	want := shadowMAC(key, k.Bucket, k.Object, etag, seq)
	if !hmac.Equal([]byte(strings.ToLower(mac)), []byte(want)) {
		return ""
	}
	return etag
}

// shadowCounter is hoard_cachelet_durable_shadows_total{result}, registered
// only with shadows on.
func newShadowCounter(reg prometheus.Registerer) *prometheus.CounterVec {
	cv := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "hoard_cachelet_durable_shadows_total",
		Help: "Placeholders of durable writes put in the store before their acknowledgement (result: written; refused, another route wrote the key; error, the store did not take it; both go through to the store) and reads that found one in the store (read).",
	}, []string{"result"})
	if reg != nil {
		reg.MustRegister(cv)
	}
	return cv
}

// writeShadow puts the placeholder of a logged write of k making etag
// over base (nil: unknown), numbered seq, conditional on the store
// holding a version of base, or the placeholder of one. An error means it
// is not in the store: the write must reach the store before it is
// acknowledged.
func (c *Cachelet) writeShadow(ctx context.Context, k cache.Key, etag string, base []string, seq uint64) error {
	put := func(cur string, present bool) error {
		sq := strconv.FormatUint(seq, 10)
		opts := store.PutOptions{UserMetadata: map[string]string{
			shadowPendingMeta: etag,
			shadowSeqMeta:     sq,
			shadowMACMeta:     shadowMAC(c.cfg.ShadowKey, k.Bucket, k.Object, etag, sq),
		}}
		if present {
			opts.IfMatch = cur
		} else {
			opts.IfNoneMatch = "*"
		}
		_, err := c.raw.Put(ctx, k.Bucket, k.Object, bytes.NewReader(nil), 0, opts)
		return err
	}
	err := store.ErrPreconditionFailed
	if len(base) == 1 {
		// The usual case: one version known, no round trip more.
		err = put(base[0], base[0] != "")
	}
	// Several versions possible (writes of the key still queued, whose
	// placeholders the store may hold), or the one known is not there:
	// ask, then put over what is found if it is one. A 412 then is a
	// change in between (often this cachelet's own delivery of an
	// earlier write): ask again, a few times.
	for try := 0; try < maxShadowTries && errors.Is(err, store.ErrPreconditionFailed); try++ {
		var cur string
		var present bool
		if cur, present, err = c.shadowBase(ctx, k, etag, base); err == nil {
			err = put(cur, present)
		}
	}
	switch {
	case err == nil:
		c.shadows.WithLabelValues("written").Inc()
	case errors.Is(err, store.ErrPreconditionFailed), errors.Is(err, errNewerInStore):
		c.shadows.WithLabelValues("refused").Inc()
	default:
		c.shadows.WithLabelValues("error").Inc()
	}
	return err
}

// shadowBase returns the store's version of k when a placeholder of a
// write making etag over base may replace it: a version of base, the
// placeholder of one of them or of this write, anything when base is
// unknown. Else errNewerInStore.
func (c *Cachelet) shadowBase(ctx context.Context, k cache.Key, etag string, base []string) (string, bool, error) {
	info, err := c.raw.Stat(ctx, k.Bucket, k.Object)
	switch {
	case errors.Is(err, store.ErrNoSuchKey):
		if base == nil || slices.Contains(base, "") {
			return "", false, nil
		}
		return "", false, fmt.Errorf("%w (the key is gone, written over %q)", errNewerInStore, base)
	case err != nil:
		return "", false, err
	}
	if base == nil || c.baseHolds(k, base, etag, info) {
		return info.ETag, true, nil
	}
	return "", false, fmt.Errorf("%w (store version %q, written over %q)", errNewerInStore, info.ETag, base)
}

// baseHolds reports whether info, the store's version of a key, is one a
// write making etag over base may replace or has made: a version of base,
// or a placeholder naming one of them or etag. A placeholder's own ETag
// (that of an empty body, the same for all) says nothing: its metadata
// decides.
func (c *Cachelet) baseHolds(k cache.Key, base []string, etag string, info store.ObjectInfo) bool {
	if p := c.pendingOf(k, info); p != "" {
		return p == etag || slices.Contains(base, p)
	}
	return slices.Contains(base, info.ETag)
}

// shadowRead is the store as readers through a cachelet with shadows see
// it: an object that is a placeholder is a doubt, never data.
type shadowRead struct {
	store.Store
	c *Cachelet
}

func (s shadowRead) Get(ctx context.Context, bucket, key string, opts store.GetOptions) (io.ReadCloser, store.ObjectInfo, *store.ByteRange, error) {
	body, info, rng, err := s.Store.Get(ctx, bucket, key, opts)
	if p := s.c.pendingOf(cache.Key{Bucket: bucket, Object: key}, info); err == nil && p != "" {
		body.Close()
		s.c.shadows.WithLabelValues("read").Inc()
		return nil, store.ObjectInfo{}, nil, fmt.Errorf("%w (%s/%s, version %s)", errPendingInStore, bucket, key, p)
	}
	return body, info, rng, err
}

func (s shadowRead) Stat(ctx context.Context, bucket, key string) (store.ObjectInfo, error) {
	info, err := s.Store.Stat(ctx, bucket, key)
	if p := s.c.pendingOf(cache.Key{Bucket: bucket, Object: key}, info); err == nil && p != "" {
		s.c.shadows.WithLabelValues("read").Inc()
		return store.ObjectInfo{}, fmt.Errorf("%w (%s/%s, version %s)", errPendingInStore, bucket, key, p)
	}
	return info, err
}
