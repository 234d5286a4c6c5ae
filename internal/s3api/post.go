package s3api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"net/url"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/hoard-io/hoard/internal/cachelet"
	s3store "github.com/hoard-io/hoard/internal/store/s3"
)

// Browser-form uploads (POST Object with a policy, ADR 18): the form
// carries its own signature, over a policy, in place of an Authorization
// header. hoard checks the signature with the application's keys and the
// policy's expiry, signs the policy again for the store identity (the
// client's conditions kept, so the store checks them against the form)
// and streams the form to the store, as a change of the key it names.

const (
	maxPostFields     = 64       // form fields before the file
	maxPostFieldBytes = 64 << 10 // one field's value (the policy is the largest)
	maxPostFormBytes  = 1 << 20  // every field before the file
)

// postSigner signs a form's policy for the store identity
// (s3store.Store.SignPostPolicy).
type postSigner interface {
	SignPostPolicy(expiration string, conditions []json.RawMessage, now time.Time) (map[string]string, error)
}

var errPostForm = apiErr("MalformedPOSTRequest", http.StatusBadRequest,
	"The body of your POST request is not well-formed multipart/form-data.")

// isPostForm reports whether r is a browser-form upload: a POST of
// multipart/form-data to a bucket, no query.
func isPostForm(r *http.Request, bucket, key string) bool {
	if r.Method != http.MethodPost || bucket == "" || key != "" || r.URL.RawQuery != "" {
		return false
	}
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	return err == nil && mt == "multipart/form-data"
}

type formField struct{ name, value string }

// postObject serves a browser-form upload.
func (s *Server) postObject(w http.ResponseWriter, r *http.Request, rq *request) error {
	_, params, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if params["boundary"] == "" {
		return errPostForm
	}
	mr := multipart.NewReader(r.Body, params["boundary"])
	fields := map[string]string{}
	var order []formField
	var file *multipart.Part
	total := 0
	for {
		part, err := mr.NextPart()
		if err != nil {
			return errPostForm // the file must come, and last
		}
		name := part.FormName()
		if name == "file" {
			file = part
			break
		}
		if name == "" || len(order) >= maxPostFields {
			return errPostForm
		}
		b, err := io.ReadAll(io.LimitReader(part, maxPostFieldBytes+1))
		if err != nil || len(b) > maxPostFieldBytes {
			return errPostForm
		}
		if total += len(name) + len(b); total > maxPostFormBytes {
			return errPostForm
		}
		fields[strings.ToLower(name)] = string(b)
		order = append(order, formField{name, string(b)})
	}
	pol, err := s.auth.VerifyPostPolicy(fields)
	if err != nil {
		s.m.authFailures.WithLabelValues(errorCode(err)).Inc()
		s.log.Warn("browser-form upload refused", "bucket", rq.bucket, "remote", r.RemoteAddr, "reason", err, "request_id", rq.id)
		return err
	}
	if g := s.cfg.Grants; g.Restricted() && !g.Allows(rq.bucket, true) {
		return errBucketNotGranted
	}
	key := strings.ReplaceAll(fields["key"], "${filename}", file.FileName())
	if key == "" {
		return apiErr("InvalidArgument", http.StatusBadRequest, "Bucket POST must contain a field named 'key'.")
	}
	rq.key = key
	p, okP := s.cl.Store().(passer)
	ps, okS := s.cl.Store().(postSigner)
	if !okP || !okS {
		return errNoPassThrough
	}
	auth, err := ps.SignPostPolicy(pol.Expiration, pol.Conditions, time.Now())
	if err != nil {
		return err
	}

	if r.ContentLength < 0 {
		return apiErr("MissingContentLength", http.StatusLengthRequired, "You must provide the Content-Length HTTP header.")
	}
	// The store needs the form's length before its body: the file is
	// spooled to a temporary file (no larger than the request), and the
	// form around it built in memory.
	spool, err := os.CreateTemp("", "hoard-post-")
	if err != nil {
		return fmt.Errorf("s3api: spooling a form upload: %w", err)
	}
	defer func() {
		spool.Close()
		os.Remove(spool.Name())
	}()
	n, err := io.Copy(spool, io.LimitReader(file, r.ContentLength+1))
	if err != nil || n > r.ContentLength {
		return errPostForm
	}
	if _, err := spool.Seek(0, io.SeekStart); err != nil {
		return err
	}
	var head bytes.Buffer
	mw := multipart.NewWriter(&head)
	if err := writePostFields(mw, order, auth, file); err != nil {
		return err
	}
	tail := "\r\n--" + mw.Boundary() + "--\r\n"
	out := &http.Request{Method: http.MethodPost, URL: &url.URL{Path: "/" + rq.bucket}, Header: http.Header{},
		Body: io.NopCloser(io.MultiReader(&head, spool, strings.NewReader(tail))), ContentLength: int64(head.Len()) + n + int64(len(tail))}
	out.Header.Set("Content-Type", mw.FormDataContentType())
	out.Header.Set(s3store.FormSignedHeader, "1")
	ctx := uploadContext(r)
	var resp *http.Response
	send := func() error {
		var err error
		resp, err = p.Pass(ctx, out.WithContext(ctx))
		if err == nil && resp.StatusCode/100 != 2 {
			return errStoreRefused
		}
		return err
	}
	err = s.cl.Change(ctx, rq.bucket, []string{key}, cachelet.ChangePut, send)
	if errors.Is(err, errStoreRefused) {
		err = nil
	}
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	h := w.Header()
	for k, vs := range resp.Header {
		h[k] = vs
	}
	if loc, err := url.Parse(h.Get("Location")); err == nil && loc.Host != "" {
		// The object's URL names this cachelet, not the store.
		if base := clientBase(r, rq.bucket); base != "" {
			h.Set("Location", base+loc.EscapedPath())
		} else {
			h.Del("Location")
		}
	}
	w.WriteHeader(resp.StatusCode)
	if _, err := io.Copy(w, resp.Body); err != nil {
		panic(http.ErrAbortHandler)
	}
	return nil
}

// writePostFields writes the form for the store up to the file's bytes:
// the client's fields but those of its signature, the store's signature,
// then the file part's header.
func writePostFields(mw *multipart.Writer, order []formField, auth map[string]string, file *multipart.Part) error {
	for _, f := range order {
		if s3store.IsPostAuthField(strings.ToLower(f.name)) {
			continue
		}
		if err := mw.WriteField(f.name, f.value); err != nil {
			return err
		}
	}
	names := make([]string, 0, len(auth))
	for k := range auth {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		if err := mw.WriteField(k, auth[k]); err != nil {
			return err
		}
	}
	hdr := textproto.MIMEHeader{}
	hdr.Set("Content-Disposition", fmt.Sprintf(`form-data; name="file"; filename=%q`, file.FileName()))
	if ct := file.Header.Get("Content-Type"); ct != "" {
		hdr.Set("Content-Type", ct)
	}
	_, err := mw.CreatePart(hdr)
	return err
}
