package s3api

import (
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/hoard-io/hoard/internal/store"
)

// unpackedHeader asks a GET for the bytes a block-format object packs
// (docs/artifacts.md, ADR 0020's amendment) instead of the object as the
// store holds it. Without it, a GET is plain S3, whatever the object is.
const unpackedHeader = "X-Hoard-Unpacked"

var (
	errUnpackedValue = apiErr("InvalidArgument", http.StatusBadRequest, "x-hoard-unpacked must be true.")
	errUnpackedRange = apiErr("InvalidArgument", http.StatusBadRequest,
		"x-hoard-unpacked reads one range of the unpacked bytes: bytes=a-b, bytes=a- or bytes=-n.")
	errUnpackedPart  = apiErr("InvalidArgument", http.StatusBadRequest, "x-hoard-unpacked reads no part of a multipart object.")
	errUnpackedOther = apiErr("InvalidArgument", http.StatusBadRequest,
		"x-hoard-unpacked reads the current version, with no subresource, version or other option the cache does not read.")
)

// unpackedUnsupported refuses an unpacked read the cache does not serve.
func unpackedUnsupported(http.ResponseWriter, *http.Request, *request) error { return errUnpackedOther }

// unpackedRequested reports whether a request carries x-hoard-unpacked
// (with any value: a wrong one is refused, not ignored).
func unpackedRequested(h http.Header) bool {
	_, ok := h[unpackedHeader]
	return ok
}

// getUnpacked answers a GET with x-hoard-unpacked: the object's unpacked
// bytes, or a range of them, read block by block through the cache
// (cachelet.GetUnpacked). The status, Content-Range and Content-Length
// are of the unpacked bytes; the ETag, Last-Modified and conditions are
// the stored object's (the version read); the stored object's checksums
// are not sent, being of other bytes.
func (s *Server) getUnpacked(w http.ResponseWriter, r *http.Request, rq *request) error {
	if v := r.Header.Values(unpackedHeader); len(v) != 1 || !strings.EqualFold(strings.TrimSpace(v[0]), "true") {
		return errUnpackedValue
	}
	if rq.query.Has("partNumber") {
		return errUnpackedPart
	}
	var rng *store.ByteRange
	if hr, ok := r.Header["Range"]; ok {
		br, parsed := parseRange(strings.Join(hr, ","))
		if !parsed {
			return errUnpackedRange
		}
		rng = &br
	}
	u, err := s.cl.GetUnpacked(r.Context(), rq.bucket, rq.key, rng)
	if err != nil {
		return err
	}
	defer u.Body.Close()
	h := w.Header()
	switch checkConditions(r.Header, u.Info) {
	case condPreconditionFailed:
		setValidators(h, u.Info)
		return errPrecondition
	case condNotModified:
		setValidators(h, u.Info)
		w.WriteHeader(http.StatusNotModified)
		return nil
	}
	setObjectHeaders(h, u.Info)
	applyOverrides(h, rq)
	h.Set("Content-Length", strconv.FormatInt(u.Length(), 10))
	h.Set("x-hoard-read", string(u.Outcome))
	h.Set("x-hoard-unpacked", "true")
	h.Set("x-hoard-unpacked-size", strconv.FormatInt(u.Size, 10))
	status := http.StatusOK
	if u.Range != nil {
		status = http.StatusPartialContent
		h.Set("Content-Range", contentRange(*u.Range, u.Size))
	}
	w.WriteHeader(status)
	if r.Method == http.MethodHead {
		return nil
	}
	if n, err := io.Copy(w, u.Body); err != nil {
		// Headers are out: a short body is the only signal left (a
		// block that failed past the first run), never other bytes.
		s.log.Warn("unpacked get aborted mid-body", "bucket", rq.bucket, "key", rq.key, "sent", n,
			"want", u.Length(), "err", err, "request_id", rq.id)
		panic(http.ErrAbortHandler)
	}
	return nil
}
