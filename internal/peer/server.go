package peer

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"

	"github.com/hoard-io/hoard/internal/onewrite"
	"github.com/hoard-io/hoard/internal/store"
)

// Owner is what a cachelet does for its peers as the owner of keys.
// Implementations are called concurrently.
type Owner interface {
	// PeerGet serves a whole object this cachelet owns, from memory or
	// from the store (which it then keeps). ifNoneMatch, when set, is the
	// caller's version: if it is current, PeerGet returns
	// store.ErrNotModified and no body. ErrNotOwner when the key is not
	// this cachelet's; store errors otherwise.
	PeerGet(ctx context.Context, bucket, key, ifNoneMatch string) (*Object, error)
	// PeerPut takes a write through to the owner: body holds exactly size
	// bytes (a body that fails verification returns an error from Read,
	// and nothing may be committed). persist says whether the store is
	// written before PeerPut returns.
	PeerPut(ctx context.Context, bucket, key string, body io.Reader, size int64, opts store.PutOptions, persist Persist) (store.PutResult, error)
	// PeerInvalidate drops cached copies of keys.
	PeerInvalidate(ctx context.Context, keys []Key)
	// PeerFlush returns once every write the owner queued before the call
	// reached the store (or failed for good), bounded by ctx. A peer about
	// to change the store directly (delete, copy, complete a multipart
	// upload), or taking over keys after a membership change, calls it so
	// that no older queued write lands after. revision, when positive, is
	// the caller's membership revision: the flush first waits until this
	// cachelet has seen it too, so it no longer takes writes for keys it
	// gave up.
	PeerFlush(ctx context.Context, revision int64) error
}

// Server serves the peer protocol for one cachelet. It is an http.Handler.
type Server struct {
	auth  *Auth
	owner Owner
	log   *slog.Logger
}

// NewServer returns a Server; log may be nil.
func NewServer(auth *Auth, owner Owner, log *slog.Logger) *Server {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Server{auth: auth, owner: owner, log: log}
}

// maxInvalidate bounds one invalidation request.
const maxInvalidate = 10000

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if err := s.auth.Verify(r); err != nil {
		s.log.Warn("peer request refused", "remote", r.RemoteAddr, "path", r.URL.Path, "reason", err)
		writeError(w, ErrUnauthenticated)
		return
	}
	a := answer{w: w, auth: s.auth, reqSig: r.Header.Get(hdrSignature)}
	if r.URL.Path == "/v1/invalidate" && r.Method == http.MethodPost {
		var keys []Key
		dec := json.NewDecoder(io.LimitReader(r.Body, 8<<20))
		if err := dec.Decode(&keys); err != nil || len(keys) > maxInvalidate {
			a.error(ErrBadRequest)
			return
		}
		s.owner.PeerInvalidate(r.Context(), keys)
		a.whole(http.StatusNoContent, nil)
		return
	}
	if r.URL.Path == "/v1/flush" && r.Method == http.MethodPost {
		rev, _ := strconv.ParseInt(r.Header.Get(hdrRevision), 10, 64)
		if err := s.owner.PeerFlush(r.Context(), rev); err != nil {
			a.error(fmt.Errorf("%w: %v", store.ErrUnavailable, err))
			return
		}
		a.whole(http.StatusNoContent, nil)
		return
	}
	if r.URL.Path == "/v1/range" && r.Method == http.MethodGet {
		s.serveRange(a, r)
		return
	}
	if r.URL.Path == "/v1/shard" {
		s.serveShard(a, r)
		return
	}
	if strings.HasPrefix(r.URL.Path, installPrefix) {
		s.serveInstall(a, r)
		return
	}
	if r.URL.Path == backupPath || r.URL.Path == backupDonePath || r.URL.Path == backupFindPath {
		s.serveBackup(a, r)
		return
	}
	if r.URL.Path == "/v1/probe" && r.Method == http.MethodGet {
		s.serveProbe(a, r)
		return
	}
	bucket, key, ok := splitObjectPath(r.URL.Path)
	if !ok {
		a.error(ErrBadRequest)
		return
	}
	switch r.Method {
	case http.MethodGet:
		s.get(a, r, bucket, key)
	case http.MethodPut:
		s.put(a, r, bucket, key)
	default:
		a.error(ErrBadRequest)
	}
}

func (s *Server) get(a answer, r *http.Request, bucket, key string) {
	obj, err := s.owner.PeerGet(r.Context(), bucket, key, strings.Trim(r.Header.Get("If-None-Match"), `"`))
	if err != nil {
		a.error(err)
		return
	}
	defer obj.Body.Close()
	h := a.w.Header()
	setInfoHeaders(h, obj.Info)
	h.Set(hdrRead, string(obj.Outcome))
	defer onewrite.Hold(a.w, r, obj.Info.Size)() // a small answer in one write
	sw := a.stream(obj.Info.Size)
	if obj.HasCRC32C {
		sw.known(obj.KnownCRC32C)
	}
	// Not limited (io.LimitReader would hide the body's WriteTo): a body
	// longer than announced fails the write past the Content-Length.
	n, err := sw.copyFrom(obj.Body)
	if err == nil {
		var digested func(uint32)
		if !obj.HasCRC32C {
			digested = obj.Digested
		}
		_, err = sw.finishDigested(digested) // the body's size checked
	}
	if err == nil {
		// Out now (in one write where held: released when get returns).
		err = http.NewResponseController(a.w).Flush()
	}
	if err != nil {
		// Headers are out: a short body is the signal, never wrong bytes.
		s.log.Warn("peer get aborted mid-body", "bucket", bucket, "key", key, "sent", n, "err", err)
		panic(http.ErrAbortHandler)
	}
}

func (s *Server) put(a answer, r *http.Request, bucket, key string) {
	size, err := strconv.ParseInt(r.Header.Get(hdrSize), 10, 64)
	if err != nil || size < 0 {
		a.error(ErrBadRequest)
		return
	}
	persist := Persist(r.Header.Get(hdrPersist))
	if persist != PersistSync && persist != PersistAsync {
		a.error(ErrBadRequest)
		return
	}
	info, err := infoFromHeaders(bucket, key, r.Header)
	if err != nil {
		a.error(ErrBadRequest)
		return
	}
	opts := store.PutOptions{
		ContentType: info.ContentType, ContentEncoding: info.ContentEncoding,
		ContentDisposition: info.ContentDisposition, ContentLanguage: info.ContentLanguage,
		CacheControl: info.CacheControl, Expires: info.Expires, UserMetadata: info.UserMetadata,
	}
	if len(info.Checksums) > 1 {
		a.error(ErrBadRequest)
		return
	}
	for algo, v := range info.Checksums {
		opts.ChecksumAlgorithm, opts.ChecksumValue = algo, v
	}
	body := &trailerChecked{r: r.Body, req: r, remaining: size, crc: crc32.New(castagnoli)}
	res, err := s.owner.PeerPut(r.Context(), bucket, key, body, size, opts, persist)
	if err != nil {
		if body.err != nil {
			err = body.err
		}
		a.error(err)
		return
	}
	a.w.Header().Set("ETag", `"`+res.ETag+`"`)
	a.whole(http.StatusOK, nil)
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// errCorrupt: a streamed body did not match its CRC32C trailer.
var errCorrupt = fmt.Errorf("%w: body does not match its checksum", ErrBadRequest)

// errLength: a streamed body was shorter or longer than announced.
var errLength = fmt.Errorf("%w: body length differs from the announced size", ErrBadRequest)

// trailerChecked passes exactly remaining bytes of a streamed body and
// withholds the last of them until the CRC32C trailer has been checked, so
// the owner never commits a body that arrived damaged or short.
type trailerChecked struct {
	r         io.Reader
	req       *http.Request
	remaining int64
	crc       interface {
		io.Writer
		Sum32() uint32
	}
	err error
	// signed, when set, is a CRC32C the request's signature covers
	// (install.go): the body must match it as well as its trailer.
	signed *uint32
}

func (t *trailerChecked) Read(p []byte) (int, error) {
	if t.err != nil {
		return 0, t.err
	}
	if t.remaining == 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > t.remaining {
		p = p[:t.remaining]
	}
	n, err := t.r.Read(p)
	t.remaining -= int64(n)
	t.crc.Write(p[:n])
	if err == io.EOF && t.remaining > 0 {
		err = errLength
	}
	if err != nil && err != io.EOF {
		t.err = err
		return 0, err
	}
	if t.remaining == 0 {
		// Read to the end, where the trailer arrives.
		var one [1]byte
		m, err := io.ReadFull(t.r, one[:])
		switch {
		case m > 0:
			t.err = errLength
			return 0, t.err
		case err != io.EOF:
			t.err = err
			return 0, err
		}
		want := t.req.Trailer.Get(hdrCRC)
		if want != strconv.FormatUint(uint64(t.crc.Sum32()), 16) || (t.signed != nil && *t.signed != t.crc.Sum32()) {
			t.err = errCorrupt
			return 0, t.err
		}
	}
	return n, nil
}
