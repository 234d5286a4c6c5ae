package peer

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/hoard-io/hoard/internal/store"
)

// Outcome says how an owner served a fetch.
type Outcome string

const (
	// RemoteHit: the owner had the object in memory.
	RemoteHit Outcome = "remote_hit"
	// RemoteMiss: the owner fetched it from the store (and keeps it).
	RemoteMiss Outcome = "remote_miss"
)

// Persist says how an owner persists a write to the store.
type Persist string

const (
	// PersistSync: the owner writes the store before it answers.
	PersistSync Persist = "sync"
	// PersistAsync: the owner answers once it holds the object, and
	// writes the store in the background.
	PersistAsync Persist = "async"
)

// Object is an object as an owner serves it to a peer.
type Object struct {
	Info    store.ObjectInfo
	Body    io.ReadCloser // the whole object; the receiver closes it
	Outcome Outcome

	// Owners only (the server's side): the body's CRC32C when the owner
	// knows it already (KnownCRC32C, valid with HasCRC32C), which spares
	// the server its pass over the body for the answer's MAC; else, when
	// set, Digested is given the CRC32C the server computed, once the
	// whole body was sent, to remember for the next answer.
	KnownCRC32C uint32
	HasCRC32C   bool
	Digested    func(crc32c uint32)
}

// Key names an object.
//
// In an invalidation an empty Key names the bucket itself: its settings
// (versioning) changed, and the receiver forgets what it knows of them.
type Key struct {
	Bucket string `json:"bucket"`
	Key    string `json:"key"`
}

// objectPath is the peer URL path of an object.
func objectPath(bucket, key string) string {
	return "/v1/o/" + url.PathEscape(bucket) + "/" + escapeKey(key)
}

// escapeKey escapes each segment of a key, keeping its slashes.
func escapeKey(key string) string {
	segs := strings.Split(key, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	return strings.Join(segs, "/")
}

// splitObjectPath is objectPath's inverse, on the decoded path.
func splitObjectPath(p string) (bucket, key string, ok bool) {
	rest, found := strings.CutPrefix(p, "/v1/o/")
	if !found {
		return "", "", false
	}
	bucket, key, found = strings.Cut(rest, "/")
	return bucket, key, found && bucket != "" && key != ""
}

// wireError is the body of a failed peer response.
type wireError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// errorCodes maps the sentinels that cross the wire, both ways.
var errorCodes = []struct {
	code   string
	err    error
	status int
}{
	{"NoSuchKey", store.ErrNoSuchKey, http.StatusNotFound},
	{"NoSuchBucket", store.ErrNoSuchBucket, http.StatusNotFound},
	{"NotModified", store.ErrNotModified, http.StatusNotModified},
	{"PreconditionFailed", store.ErrPreconditionFailed, http.StatusPreconditionFailed},
	{"Unavailable", store.ErrUnavailable, http.StatusServiceUnavailable},
	{"NotOwner", ErrNotOwner, http.StatusMisdirectedRequest},
	{"Unauthorized", ErrUnauthenticated, http.StatusForbidden},
	{"BadRequest", ErrBadRequest, http.StatusBadRequest},
	{"Refused", ErrRefused, http.StatusConflict},
}

// ErrNotOwner: the peer does not own the key (its ring differs from the
// caller's, as during a membership change). The caller falls back to the
// store.
var ErrNotOwner = errors.New("peer: not the owner")

// ErrBadRequest: the peer refused the request as malformed.
var ErrBadRequest = errors.New("peer: bad request")

// writeError sends err unsigned: only to requests that failed
// authentication (every other answer goes through answer.error).
func writeError(w http.ResponseWriter, err error) {
	status, body := errorAnswer(err)
	if body != nil {
		w.Header().Set("Content-Type", "application/json")
	}
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// errorAnswer is the status and body of the answer that carries err.
func errorAnswer(err error) (status int, body []byte) {
	code, status := "Internal", http.StatusInternalServerError
	var api *store.APIError
	switch {
	case errors.As(err, &api):
		code, status = "API:"+api.Code, api.StatusCode
	default:
		for _, e := range errorCodes {
			if errors.Is(err, e.err) {
				code, status = e.code, e.status
				break
			}
		}
	}
	if status == http.StatusNotModified {
		return status, nil
	}
	body, _ = json.Marshal(wireError{Code: code, Message: err.Error()})
	return status, body
}

// readError turns a failed response back into the sentinel it carries.
func readError(resp *http.Response) error {
	if resp.StatusCode == http.StatusNotModified {
		return store.ErrNotModified
	}
	var we wireError
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	_ = json.Unmarshal(data, &we)
	if c, ok := strings.CutPrefix(we.Code, "API:"); ok {
		return &store.APIError{Code: c, Message: we.Message, StatusCode: resp.StatusCode}
	}
	for _, e := range errorCodes {
		if e.code == we.Code {
			return fmt.Errorf("%w (peer: %s)", e.err, we.Message)
		}
	}
	if resp.StatusCode >= 500 {
		return fmt.Errorf("%w: peer answered %d: %s", store.ErrUnavailable, resp.StatusCode, we.Message)
	}
	return fmt.Errorf("%w: peer answered %d: %s", ErrBadRequest, resp.StatusCode, we.Message)
}

// setInfoHeaders writes object metadata as S3 headers, under net/http's
// canonical names (set directly: no canonicalization, no map built per
// answer).
func setInfoHeaders(h http.Header, info store.ObjectInfo) {
	h["Etag"] = []string{`"` + info.ETag + `"`}
	h[hdrSize] = []string{strconv.FormatInt(info.Size, 10)}
	if !info.LastModified.IsZero() {
		var b [40]byte
		h["Last-Modified"] = []string{string(info.LastModified.UTC().AppendFormat(b[:0], time.RFC3339Nano))}
	}
	for _, f := range [...]struct{ name, v string }{
		{"Content-Type", info.ContentType}, {"Content-Encoding", info.ContentEncoding},
		{"Content-Disposition", info.ContentDisposition}, {"Content-Language", info.ContentLanguage},
		{"Cache-Control", info.CacheControl}, {"Expires", info.Expires}, {"X-Amz-Version-Id", info.VersionID},
		{"X-Amz-Checksum-Type", info.ChecksumType},
	} {
		if f.v != "" {
			h[f.name] = []string{f.v}
		}
	}
	for k, v := range info.UserMetadata {
		h["X-Amz-Meta-"+k] = []string{v} // lower-case suffix kept as is
	}
	for algo, v := range info.Checksums {
		h.Set("X-Amz-Checksum-"+algo, v)
	}
	for k, v := range info.Headers {
		h.Set(k, v)
	}
}

// infoFromHeaders reads what setInfoHeaders wrote.
func infoFromHeaders(bucket, key string, h http.Header) (store.ObjectInfo, error) {
	info := store.ObjectInfo{
		Bucket: bucket, Key: key, ETag: strings.Trim(h.Get("ETag"), `"`),
		ContentType: h.Get("Content-Type"), ContentEncoding: h.Get("Content-Encoding"),
		ContentDisposition: h.Get("Content-Disposition"), ContentLanguage: h.Get("Content-Language"),
		CacheControl: h.Get("Cache-Control"), Expires: h.Get("Expires"), VersionID: h.Get("X-Amz-Version-Id"),
		ChecksumType: h.Get("X-Amz-Checksum-Type"),
	}
	size, err := strconv.ParseInt(h.Get(hdrSize), 10, 64)
	if err != nil || size < 0 {
		return info, fmt.Errorf("%w: bad size %q", store.ErrUnavailable, h.Get(hdrSize))
	}
	info.Size = size
	if lm := h.Get("Last-Modified"); lm != "" {
		if info.LastModified, err = time.Parse(time.RFC3339Nano, lm); err != nil {
			return info, fmt.Errorf("%w: bad Last-Modified %q", store.ErrUnavailable, lm)
		}
	}
	for name, vals := range h {
		if len(vals) == 0 {
			continue
		}
		if m, ok := strings.CutPrefix(name, "X-Amz-Meta-"); ok {
			if info.UserMetadata == nil {
				info.UserMetadata = map[string]string{}
			}
			info.UserMetadata[strings.ToLower(m)] = vals[0]
		} else if len(name) < len("x-amz-") || !strings.EqualFold(name[:len("x-amz-")], "x-amz-") {
			continue // the object headers are all x-amz-*: no lower-case copy of the others
		} else if lower, ok := store.ObjectHeaderFold(name); ok {
			if info.Headers == nil {
				info.Headers = map[string]string{}
			}
			info.Headers[lower] = vals[0]
		} else if a, ok := strings.CutPrefix(name, "X-Amz-Checksum-"); ok && a != "Type" {
			if info.Checksums == nil {
				info.Checksums = map[string]string{}
			}
			info.Checksums[strings.ToUpper(a)] = vals[0]
		}
	}
	return info, nil
}
