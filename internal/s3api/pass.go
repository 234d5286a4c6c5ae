package s3api

import (
	"bytes"
	"context"
	"errors"
	"hash"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/hoard-io/hoard/internal/cachelet"
	"github.com/hoard-io/hoard/internal/checksum"
	"github.com/hoard-io/hoard/internal/notify"
	"github.com/hoard-io/hoard/internal/onewrite"
	"github.com/hoard-io/hoard/internal/s3auth"
	"github.com/hoard-io/hoard/internal/store"
)

// passer is the store's pass-through: it sends a request as the client
// wrote it, signed with the store's own identity, and returns the store's
// answer whatever its status (s3store.Store.Pass documents the contract:
// a relative, path-style URL; hop-by-hop and signature headers are its
// to drop; the caller closes the answer's body). Errors wrap
// store.ErrUnavailable when the store could not be reached or missed its
// deadline.
type passer interface {
	Pass(ctx context.Context, req *http.Request) (*http.Response, error)
}

// errNoPassThrough answers a request only the store could answer, when
// the store behind the cachelet cannot take requests as they are (an
// in-memory store in tests).
var errNoPassThrough = apiErr("NotImplemented", http.StatusNotImplemented,
	"This operation is answered by the object store itself, and the store behind this cache does not take requests passed through.")

// errStoreRefused tells Cachelet.Change that the store answered a
// request passed through with an error of its own (relayed as it is).
var errStoreRefused = errors.New("s3api: the store refused the request")

// presignParams are the query parameters of the client's own signature:
// the store's signature replaces them.
var presignParams = []string{
	"X-Amz-Algorithm", "X-Amz-Credential", "X-Amz-Date", "X-Amz-Expires", "X-Amz-SignedHeaders",
	"X-Amz-Signature", "X-Amz-Security-Token", "AWSAccessKeyId", "Signature", "Expires",
}

// pass sends the request to the store as it is and relays the answer
// (ADR 0018). A request that can change an object (any method but GET and
// HEAD on a key) runs as a cachelet.Change of that key: invalidated here
// and at its owner before and after.
func (s *Server) pass(w http.ResponseWriter, r *http.Request, rq *request) error {
	var keys []string
	if rq.key != "" && r.Method != http.MethodGet && r.Method != http.MethodHead && !uploadOps[rq.op] {
		keys = []string{rq.key}
	}
	return s.passWith(w, r, rq, nil, keys)
}

// changeKinds name the changes of typed operations passed through, for
// the cachelet's metrics; any other change is cachelet.ChangeOther.
var changeKinds = map[string]cachelet.ChangeKind{
	"PutObject": cachelet.ChangePut, "CopyObject": cachelet.ChangeCopy,
	"CompleteMultipartUpload": cachelet.ChangeComplete, "DeleteObject": cachelet.ChangeDelete,
	"DeleteObjects": cachelet.ChangeDeleteMany,
}

// uploadOps are the steps of a multipart upload that neither change nor
// read the object itself: they pass through without invalidating or
// settling its key (completion does, as any write).
var uploadOps = map[string]bool{
	"CreateMultipartUpload": true, "UploadPart": true, "ListParts": true, "AbortMultipartUpload": true,
}

// passWith is pass with the body already read (DeleteObjects parses its
// keys first) and the keys the request may change.
func (s *Server) passWith(w http.ResponseWriter, r *http.Request, rq *request, body []byte, keys []string) error {
	p, ok := s.cl.Store().(passer)
	if !ok {
		return errNoPassThrough
	}
	if body == nil {
		// The store gets the client's checksum and Content-MD5 headers
		// and judges them: its answer to a mismatch is the client's.
		rq.auth.LeaveDigestsToStore()
		r.Body = rq.auth.Body
	}
	out, capture := s.outgoing(r, rq, body)
	ctx := r.Context()
	if out.ContentLength != 0 {
		ctx = uploadContext(r)
	}
	var resp *http.Response
	send := func() error {
		var err error
		resp, err = p.Pass(ctx, out.WithContext(ctx))
		if capture != nil {
			err = bodyError(capture, err)
		}
		if err == nil && resp.StatusCode/100 != 2 {
			// Relayed below as it is; a change the store refused is
			// not counted as one that happened.
			return errStoreRefused
		}
		return err
	}
	var err error
	switch {
	case len(keys) > 0:
		if src := copySourceOf(r); src != nil {
			// A copy reads its source from the store: the source's
			// queued writes land first, as for the typed copy.
			if err = s.cl.Settle(ctx, src.Bucket, src.Key); err != nil {
				return err
			}
		}
		err = s.cl.Change(ctx, rq.bucket, keys, changeKinds[rq.op], send)
	case uploadOps[rq.op]:
		err = send()
	case rq.op == "DeleteBucket":
		// The bucket's writes still queued land first: the store
		// refuses to delete a bucket they would have filled, as it
		// would without a cache.
		if err = s.cl.Settle(ctx, rq.bucket); err == nil {
			err = send()
		}
	case lists(r, rq):
		// A listing from the store: the bucket's writes still queued,
		// here and at every other member, land first, so that it shows
		// every write acknowledged before it (as it would without a
		// cache).
		if err = s.cl.Settle(ctx, rq.bucket); err == nil {
			err = send()
		}
	case rq.key != "":
		// A read of a key from the store: writes of it still queued
		// (asynchronous write targets) land first.
		if err = s.cl.Settle(ctx, rq.bucket, rq.key); err == nil {
			err = send()
		}
	default:
		err = send()
	}
	if rq.key == "" && rq.bucket != "" && r.Method != http.MethodGet && r.Method != http.MethodHead {
		// A bucket created, deleted or set (its versioning, its object
		// lock): what the cachelet knew of it is asked again.
		s.cl.BucketChanged(ctx, rq.bucket)
	}
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
	var src io.Reader = resp.Body
	if base := clientBase(r, rq.bucket); rq.op == "CompleteMultipartUpload" && resp.StatusCode == http.StatusOK && base != "" {
		// The object's URL names this cachelet, not the store.
		src = &locationRewriter{r: resp.Body, base: base}
		h.Del("Content-Length")
	}
	w.WriteHeader(resp.StatusCode)
	if r.Method == http.MethodHead {
		return nil
	}
	if resp.ContentLength < 0 && resp.StatusCode != http.StatusNoContent && resp.StatusCode != http.StatusNotModified {
		// The store sent no length (a stream): neither does hoard. Go's
		// server would give a short answer one once the handler ends.
		_ = http.NewResponseController(w).Flush()
	}
	var head *headCapture
	if s.cfg.Notifier != nil && (rq.op == "CopyObject" || rq.op == "CompleteMultipartUpload") {
		// These may fail inside a 200 answer: keep its start to tell.
		head = &headCapture{r: src}
		src = head
	}
	release := func() {}
	if resp.ContentLength >= 0 {
		// A small answer (a listing, tags, an ACL) in one write.
		release = onewrite.Hold(w, r, resp.ContentLength)
		defer release()
	}
	if n, err := io.Copy(w, src); err != nil {
		// Headers are out: a short body is the only signal left.
		s.log.Warn("pass-through aborted mid-body", "op", rq.op, "bucket", rq.bucket, "key", rq.key, "sent", n,
			"err", err, "request_id", rq.id)
		panic(http.ErrAbortHandler)
	}
	release() // out now: what follows may ask the store again
	if resp.StatusCode/100 == 2 && !head.failed() {
		if rq.op == "DeleteBucket" {
			// Nothing cached of a deleted bucket may be served.
			s.cl.DropPrefix(rq.bucket, "")
		}
		s.notifyPassed(w, r, rq, resp)
	}
	return nil
}

// lists reports whether r lists a bucket's objects, versions or uploads.
func lists(r *http.Request, rq *request) bool {
	if rq.key != "" || rq.bucket == "" || r.Method != http.MethodGet {
		return false
	}
	switch rq.op {
	case "ListObjects", "ListObjectsV2", "ListMultipartUploads":
		return true
	}
	_, versions := rq.query["versions"]
	return versions
}

// copySourceOf is the source of a copy (CopyObject, UploadPartCopy), or
// nil when r names none that parses.
func copySourceOf(r *http.Request) *store.CopySource {
	v := r.Header.Get("x-amz-copy-source")
	if v == "" {
		return nil
	}
	src, err := parseCopySource(v)
	if err != nil {
		return nil
	}
	return &src
}

// headCapture keeps the first bytes of an answer (4 KiB at most) as they
// are relayed.
type headCapture struct {
	r   io.Reader
	buf []byte
}

func (h *headCapture) Read(p []byte) (int, error) {
	n, err := h.r.Read(p)
	if room := 4<<10 - len(h.buf); room > 0 {
		h.buf = append(h.buf, p[:min(n, room)]...)
	}
	return n, err
}

// failed reports whether the answer, a 200, was an S3 error document
// (S3 and MinIO answer a copy or a completion that fails after they began
// answering that way).
func (h *headCapture) failed() bool {
	return h != nil && bytes.Contains(h.buf, []byte("<Error>"))
}

// notifyPassed sends the object-created event of a write that passed
// through, as its typed path would have: a PutObject's from its answer, a
// copy's or completion's once the store says the object's size and ETag.
func (s *Server) notifyPassed(w http.ResponseWriter, r *http.Request, rq *request, resp *http.Response) {
	if s.cfg.Notifier == nil {
		return
	}
	switch rq.op {
	case "PutObject":
		s.notify(r, rq, notify.ObjectCreatedPut, rq.auth.DecodedLength, strings.Trim(resp.Header.Get("ETag"), `"`))
	case "CopyObject", "CompleteMultipartUpload":
		name := notify.ObjectCreatedCopy
		if rq.op == "CompleteMultipartUpload" {
			name = notify.ObjectCreatedCompleteMultipartUpload
		}
		_ = http.NewResponseController(w).Flush()
		ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), notifySizeTimeout)
		defer cancel()
		info, err := s.cl.Store().Stat(ctx, rq.bucket, rq.key)
		if err != nil {
			s.log.Warn("no event for a write passed through: the store did not describe the object", "bucket", rq.bucket,
				"key", rq.key, "event", name, "err", err, "request_id", rq.id)
			return
		}
		s.notify(r, rq, name, info.Size, info.ETag)
	}
}

// outgoing is the request for the store: the client's method, bucket,
// key, query and headers, and its body as s3auth decoded and verifies
// it, without the client's own signature. capture, when not nil, holds
// the first error reading the client's body.
func (s *Server) outgoing(r *http.Request, rq *request, body []byte) (*http.Request, *errCapture) {
	q := make(url.Values, len(rq.query))
	for k, vs := range rq.query {
		q[k] = vs
	}
	if rq.auth.Method == s3auth.V4Presigned || rq.auth.Method == s3auth.V2Presigned {
		for _, p := range presignParams {
			delete(q, p)
		}
	}
	path := "/"
	if rq.bucket != "" {
		path += rq.bucket
		if rq.key != "" {
			path += "/" + rq.key
		}
	}
	u := &url.URL{Path: path, RawQuery: strings.ReplaceAll(q.Encode(), "+", "%20")}
	h := r.Header.Clone()
	// The body as decoded: the aws-chunked framing is gone, and so is its
	// trailer, verified here; its checksum travels on in the store's own
	// trailer (see trailed).
	if ce := rq.auth.ContentEncoding; ce != "" {
		h.Set("Content-Encoding", ce)
	} else {
		h.Del("Content-Encoding")
	}
	h.Del("X-Amz-Trailer")
	h.Del("X-Amz-Decoded-Content-Length")
	out := &http.Request{Method: r.Method, URL: u, Header: h, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1}
	var capture *errCapture
	switch n := rq.auth.DecodedLength; {
	case body != nil:
		out.Body, out.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
	case n > 0 && rq.auth.ChecksumAlgorithm != "" && rq.auth.ChecksumValue == "":
		// A checksum in the client's trailer: the store gets it in a
		// trailer too, once the body has been read and verified.
		capture = &errCapture{r: newExactBody(r.Body, n)}
		name := rq.auth.ChecksumAlgorithm.HeaderName()
		out.Trailer = http.Header{name: {checksum.Encode(make([]byte, rq.auth.ChecksumAlgorithm.Size()))}}
		out.Body, out.ContentLength = io.NopCloser(&trailed{r: capture, auth: rq.auth, trailer: out.Trailer, name: name}), n
	case n > 0 && rq.op == "PutObject" && signedChunks(rq, r.Header):
		// Chunk signatures are checked here, which the store cannot do:
		// a body they cut short must not be committed, whatever a store
		// does with a request cut short (versitygw commits it). A CRC32C
		// trailer of hoard's own makes the store's commit depend on the
		// whole body arriving, as the typed PUT's does (store/s3 Put).
		// Not for UploadPart: a part with a checksum of its own breaks
		// the completion of an upload without checksums on versitygw.
		// A part keeps its X-Amz-Content-Sha256 of signed chunks, and
		// the store client sends it in chunks signed anew, the last one
		// too, which a body cut short lacks (store/s3 Pass).
		capture = &errCapture{r: newExactBody(r.Body, n)}
		name := checksum.CRC32C.HeaderName()
		out.Trailer = http.Header{name: {checksum.Encode(make([]byte, checksum.CRC32C.Size()))}}
		out.Body, out.ContentLength = io.NopCloser(&crcTrailed{r: capture, h: checksum.New(checksum.CRC32C), trailer: out.Trailer, name: name}), n
	case n > 0:
		capture = &errCapture{r: newExactBody(r.Body, n)}
		out.Body, out.ContentLength = io.NopCloser(capture), n
	case n < 0:
		capture = &errCapture{r: r.Body}
		out.Body, out.ContentLength = io.NopCloser(capture), -1
	default:
		out.Body = http.NoBody
	}
	return out, capture
}

// trailed sets a trailer's value from the client's verified trailer when
// its body ends: s3auth knows it only then.
type trailed struct {
	r       io.Reader
	auth    *s3auth.Request
	trailer http.Header
	name    string
}

func (t *trailed) Read(p []byte) (int, error) {
	n, err := t.r.Read(p)
	if err == io.EOF {
		if _, v := t.auth.TrailerChecksum(); v != "" {
			t.trailer[t.name] = []string{v} // the name as given: the signer sized the stream by it
		}
	}
	return n, err
}

// signedChunks reports whether r's body came in signed aws-chunked
// chunks with no checksum of the client's.
func signedChunks(rq *request, h http.Header) bool {
	_, chunks := payloadSigning(rq, h)
	return chunks && rq.auth.ChecksumAlgorithm == ""
}

// crcTrailed computes its body's CRC32C as it is read and sets the
// trailer to it at the end.
type crcTrailed struct {
	r       io.Reader
	h       hash.Hash
	trailer http.Header
	name    string
}

func (t *crcTrailed) Read(p []byte) (int, error) {
	n, err := t.r.Read(p)
	t.h.Write(p[:n])
	if err == io.EOF {
		t.trailer[t.name] = []string{checksum.Encode(t.h.Sum(nil))}
	}
	return n, err
}

// subresources name the operations only the store answers, for metrics
// and logs; the list bounds the names a request can produce. Sorted.
var subresources = []string{
	"accelerate", "acl", "analytics", "attributes", "cors", "encryption", "intelligent-tiering",
	"inventory", "legal-hold", "lifecycle", "logging", "metrics", "notification", "object-lock",
	"ownershipControls", "partNumber", "policy", "policyStatus", "publicAccessBlock", "replication",
	"requestPayment", "restore", "retention", "select", "tagging", "torrent", "uploads", "versionId",
	"versioning", "versions", "website",
}

// bucketConfigDeletes are the sub-resources a DELETE of a bucket removes
// instead of the bucket itself. A DELETE of a bucket naming none of them
// deletes the bucket, whatever else its query says.
var bucketConfigDeletes = map[string]bool{
	"analytics": true, "cors": true, "encryption": true, "intelligent-tiering": true, "inventory": true,
	"lifecycle": true, "metrics": true, "ownershipControls": true, "policy": true, "publicAccessBlock": true,
	"replication": true, "tagging": true, "website": true,
}

// passOp names a request with a query parameter the typed operations do
// not know: "Pass" with its method and the first sub-resource it names
// ("PassGET?versioning"), or "DeleteBucket" for a DELETE of a bucket that
// removes the bucket, so that the bucket grants' rule for it holds.
func passOp(method string, rq *request) string {
	sub := ""
	for _, name := range subresources {
		if rq.query.Has(name) {
			sub = name
			break
		}
	}
	if method == http.MethodDelete && rq.bucket != "" && rq.key == "" && !bucketConfigDeletes[sub] {
		return "DeleteBucket"
	}
	if sub == "" {
		return "Pass" + method
	}
	return "Pass" + method + "?" + sub
}

// carriedHeaders are the x-amz-* request headers each typed operation
// honours, beyond those of authentication and body framing that every
// operation takes. A request with any other x-amz-* header (object lock,
// server-side encryption, ACLs, tagging, storage class, checksum type, an
// expected bucket owner, ...) goes to the store as it is, so that the
// store does what was asked.
var carriedHeaders = map[string][]string{
	"GetObject":             {"x-amz-checksum-mode"},
	"HeadObject":            {"x-amz-checksum-mode"},
	"PutObject":             {"x-amz-meta-", "x-amz-checksum-", "x-amz-checksum-algorithm"},
	"UploadPart":            {"x-amz-meta-", "x-amz-checksum-", "x-amz-checksum-algorithm"},
	"CreateMultipartUpload": {"x-amz-meta-", "x-amz-checksum-algorithm"},
	"CopyObject": {"x-amz-meta-", "x-amz-copy-source", "x-amz-copy-source-if-match",
		"x-amz-copy-source-if-none-match", "x-amz-metadata-directive"},
	// Bodies whose checksum headers s3auth verifies.
	"DeleteObjects": {"x-amz-checksum-"},
	"CreateBucket":  {"x-amz-checksum-"},
}

// framingHeaders are the x-amz-* headers of authentication and body
// framing: s3auth takes them for every operation.
var framingHeaders = map[string]bool{
	"x-amz-content-sha256": true, "x-amz-date": true, "x-amz-security-token": true,
	"x-amz-decoded-content-length": true, "x-amz-trailer": true, "x-amz-sdk-checksum-algorithm": true,
	"x-amz-user-agent": true,
}

// carried reports whether op's typed handler honours every x-amz-*
// header of h. An entry ending in "-" is a prefix; "x-amz-checksum-"
// stands for the checksum value headers only (x-amz-checksum-crc32, ...).
func carried(op string, h http.Header) bool {
	for name := range h {
		if len(name) < len("x-amz-") || !strings.EqualFold(name[:len("x-amz-")], "x-amz-") {
			continue // most headers: no lower-case copy made
		}
		n := strings.ToLower(name)
		if framingHeaders[n] {
			continue
		}
		ok := false
		for _, c := range carriedHeaders[op] {
			switch {
			case c == "x-amz-checksum-":
				_, err := checksum.ParseHeaderName(n)
				ok = err == nil
			case strings.HasSuffix(c, "-"):
				ok = strings.HasPrefix(n, c)
			default:
				ok = n == c
			}
			if ok {
				break
			}
		}
		if !ok {
			return false
		}
	}
	return true
}
