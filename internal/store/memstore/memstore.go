// Package memstore is a complete store.Store held in memory: buckets,
// objects with S3's ETags, metadata, ranges, conditional reads, listings
// (V1 and V2) with prefixes, delimiters and pages, copies, multipart
// uploads and checksums.
//
// It exists so that code above the store (the cachelet first) can be tested
// hermetically and deterministically, and it carries hooks for that: call
// counts, bodies and answers that wait until a test releases them, bodies
// that break, and a switch that takes the whole store down. It is not a
// stand-in for a real store in integration tests: those run against one.
package memstore

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hoard-io/hoard/internal/checksum"
	"github.com/hoard-io/hoard/internal/store"
)

// MinPartSize is the smallest part S3 accepts in a multipart upload, except
// for the last part.
const MinPartSize = 5 << 20

// maxPartNumber is S3's largest part number.
const maxPartNumber = 10000

// defaultMaxKeys is S3's page size when the caller names none.
const defaultMaxKeys = 1000

// Store is an in-memory store.Store. The zero value is not usable; call New.
// Safe for concurrent use.
type Store struct {
	mu      sync.Mutex
	buckets map[string]*bucket
	uploads map[string]*upload // by upload id

	hooks hooks
}

type bucket struct {
	created time.Time
	objects map[string]*object
}

// object is one version of an object. It is never modified once stored:
// a write replaces it, so a body opened before the write keeps reading the
// version it opened.
type object struct {
	data []byte
	info store.ObjectInfo // Bucket, Key, Size, ETag, LastModified, metadata, checksums
}

type upload struct {
	bucket, key string
	opts        store.PutOptions
	algo        checksum.Algorithm // "" when the upload has no checksum algorithm
	parts       map[int]*part
}

type part struct {
	store.Part
	data []byte
	md5  []byte
	sum  []byte // raw digest with the upload's algorithm, if any
}

// New returns an empty store.
func New() *Store {
	return &Store{
		buckets: make(map[string]*bucket),
		uploads: make(map[string]*upload),
	}
}

var _ store.Store = (*Store)(nil)

// now is the store's clock. S3 reports Last-Modified to the second in
// headers; listings carry milliseconds. Milliseconds are kept here.
func now() time.Time { return time.Now().UTC().Truncate(time.Millisecond) }

func apiError(code string, status int, format string, args ...any) error {
	return &store.APIError{Code: code, StatusCode: status, Message: fmt.Sprintf(format, args...)}
}

// wrap names the operation in err while keeping it recognisable with
// errors.Is and errors.As.
func wrap(op, bucket, key string, err error) error {
	where := op
	if bucket != "" {
		where += " " + bucket
		if key != "" {
			where += "/" + key
		}
	}
	return fmt.Errorf("memstore: %s: %w", where, err)
}

// begin is the start of every call: it counts the call, and refuses it when
// the store is down or the caller has given up.
func (s *Store) begin(ctx context.Context, op, bucket, key string) error {
	s.hooks.count(op)
	if err := ctx.Err(); err != nil {
		return wrap(op, bucket, key, err)
	}
	if s.hooks.isDown() {
		return wrap(op, bucket, key, fmt.Errorf("store is down: %w", store.ErrUnavailable))
	}
	return nil
}

// bucketLocked returns the named bucket or ErrNoSuchBucket. Called with mu held.
func (s *Store) bucketLocked(name string) (*bucket, error) {
	b := s.buckets[name]
	if b == nil {
		return nil, store.ErrNoSuchBucket
	}
	return b, nil
}

// objectLocked returns the named object. Called with mu held.
func (s *Store) objectLocked(bucketName, key string) (*object, error) {
	b, err := s.bucketLocked(bucketName)
	if err != nil {
		return nil, err
	}
	o := b.objects[key]
	if o == nil {
		return nil, store.ErrNoSuchKey
	}
	return o, nil
}

// etagMatches compares a condition's ETag with an object's, as HTTP does
// for strong validators: quotes are optional and "*" matches any object.
func etagMatches(cond, etag string) bool {
	for c := range strings.SplitSeq(cond, ",") {
		c = strings.TrimSpace(c)
		if c == "*" || strings.Trim(strings.TrimPrefix(c, "W/"), `"`) == etag {
			return true
		}
	}
	return false
}

// resolveRange turns a requested range into absolute inclusive bounds for
// an object of the given size, as S3 does.
func resolveRange(r store.ByteRange, size int64) (store.ByteRange, error) {
	if r.Start < 0 {
		n := -r.Start
		if size == 0 || n == 0 {
			return store.ByteRange{}, store.ErrInvalidRange
		}
		n = min(n, size)
		return store.ByteRange{Start: size - n, End: size - 1}, nil
	}
	if r.Start >= size || (r.End >= 0 && r.End < r.Start) {
		return store.ByteRange{}, store.ErrInvalidRange
	}
	end := r.End
	if end < 0 || end >= size {
		end = size - 1
	}
	return store.ByteRange{Start: r.Start, End: end}, nil
}

// infoOut returns a copy of info the caller may modify.
func infoOut(info store.ObjectInfo, withChecksums bool) store.ObjectInfo {
	info.UserMetadata = maps.Clone(info.UserMetadata)
	if withChecksums && len(info.Checksums) > 0 {
		info.Checksums = maps.Clone(info.Checksums)
	} else {
		info.Checksums, info.ChecksumType = nil, ""
	}
	return info
}

// Get implements store.Store.
func (s *Store) Get(ctx context.Context, bucketName, key string, opts store.GetOptions) (io.ReadCloser, store.ObjectInfo, *store.ByteRange, error) {
	if err := s.begin(ctx, "get", bucketName, key); err != nil {
		return nil, store.ObjectInfo{}, nil, err
	}
	s.mu.Lock()
	o, err := s.objectLocked(bucketName, key)
	s.mu.Unlock()
	body, info, rng, err := s.answerGet(o, opts, err)
	s.hooks.recordGet(opts, rng, err)
	_ = s.hooks.holdGet(ctx, bucketName, key, false) // the body sees the context's end
	if err != nil {
		return nil, store.ObjectInfo{}, nil, wrap("get", bucketName, key, err)
	}
	return s.hooks.body(ctx, bucketName, key, body), info, rng, nil
}

// answerGet decides what a Get of o answers: conditions first, then the
// range, as S3 does.
func (s *Store) answerGet(o *object, opts store.GetOptions, err error) ([]byte, store.ObjectInfo, *store.ByteRange, error) {
	if err != nil {
		return nil, store.ObjectInfo{}, nil, err
	}
	if opts.IfMatch != "" && !etagMatches(opts.IfMatch, o.info.ETag) {
		return nil, store.ObjectInfo{}, nil, store.ErrPreconditionFailed
	}
	if opts.IfNoneMatch != "" && etagMatches(opts.IfNoneMatch, o.info.ETag) {
		return nil, store.ObjectInfo{}, nil, store.ErrNotModified
	}
	if opts.Range == nil {
		return o.data, infoOut(o.info, opts.ChecksumMode), nil, nil
	}
	r, err := resolveRange(*opts.Range, o.info.Size)
	if err != nil {
		return nil, store.ObjectInfo{}, nil, err
	}
	// S3 reports no whole-object checksum on a ranged read.
	return o.data[r.Start : r.End+1], infoOut(o.info, false), &r, nil
}

// Stat implements store.Store.
func (s *Store) Stat(ctx context.Context, bucketName, key string) (store.ObjectInfo, error) {
	if err := s.begin(ctx, "stat", bucketName, key); err != nil {
		return store.ObjectInfo{}, err
	}
	s.mu.Lock()
	o, err := s.objectLocked(bucketName, key)
	var info store.ObjectInfo
	if err == nil {
		info = infoOut(o.info, true)
	}
	s.mu.Unlock()
	if herr := s.hooks.holdGet(ctx, bucketName, key, true); herr != nil {
		return store.ObjectInfo{}, wrap("stat", bucketName, key, herr)
	}
	if err != nil {
		return store.ObjectInfo{}, wrap("stat", bucketName, key, err)
	}
	return info, nil
}

// readBody reads a request body of the announced size (size < 0: unknown)
// and checks it against what the request declared.
func readBody(r io.Reader, size int64, opts store.PutOptions, defaultAlgo checksum.Algorithm) (data []byte, md5sum, sum []byte, algo checksum.Algorithm, err error) {
	algo = defaultAlgo
	if opts.ChecksumAlgorithm != "" {
		if algo, err = checksum.ParseAlgorithm(opts.ChecksumAlgorithm); err != nil {
			return nil, nil, nil, "", apiError("InvalidRequest", http.StatusBadRequest, "%v", err)
		}
	}
	var want []byte
	if opts.ChecksumValue != "" {
		if algo == "" {
			return nil, nil, nil, "", apiError("InvalidRequest", http.StatusBadRequest, "checksum value without an algorithm")
		}
		if want, err = checksum.ParseValue(algo, opts.ChecksumValue); err != nil {
			return nil, nil, nil, "", apiError("InvalidRequest", http.StatusBadRequest, "%v", err)
		}
	}
	var wantMD5 []byte
	if opts.ContentMD5 != "" {
		if wantMD5, err = checksum.ParseContentMD5(opts.ContentMD5); err != nil {
			return nil, nil, nil, "", apiError("InvalidDigest", http.StatusBadRequest, "The Content-MD5 you specified was invalid.")
		}
	}

	if size >= 0 {
		data = make([]byte, 0, size)
		// One byte more than announced tells a body that is too long.
		data, err = readAll(io.LimitReader(r, size+1), data)
	} else {
		data, err = readAll(r, nil)
	}
	if err != nil {
		return nil, nil, nil, "", fmt.Errorf("read request body: %w", err)
	}
	if size >= 0 && int64(len(data)) < size {
		return nil, nil, nil, "", apiError("IncompleteBody", http.StatusBadRequest, "body has %d of the %d bytes announced", len(data), size)
	}
	if size >= 0 && int64(len(data)) > size {
		return nil, nil, nil, "", apiError("InvalidRequest", http.StatusBadRequest, "body is longer than the %d bytes announced", size)
	}

	m := md5.Sum(data)
	if wantMD5 != nil && !bytes.Equal(wantMD5, m[:]) {
		return nil, nil, nil, "", apiError("BadDigest", http.StatusBadRequest, "The Content-MD5 you specified did not match what we received.")
	}
	if algo != "" {
		h := checksum.New(algo)
		h.Write(data)
		sum = h.Sum(nil)
		if want != nil && !bytes.Equal(want, sum) {
			return nil, nil, nil, "", apiError("BadDigest", http.StatusBadRequest, "The %s you specified did not match the calculated checksum.", algo)
		}
	}
	return data, m[:], sum, algo, nil
}

// readAll is io.ReadAll into buf's spare capacity.
func readAll(r io.Reader, buf []byte) ([]byte, error) {
	w := bytes.NewBuffer(buf)
	_, err := w.ReadFrom(r)
	return w.Bytes(), err
}

// infoFromPut is the metadata a write records.
func infoFromPut(bucketName, key string, opts store.PutOptions) store.ObjectInfo {
	info := store.ObjectInfo{
		Bucket:             bucketName,
		Key:                key,
		ContentType:        opts.ContentType,
		ContentEncoding:    opts.ContentEncoding,
		ContentDisposition: opts.ContentDisposition,
		ContentLanguage:    opts.ContentLanguage,
		CacheControl:       opts.CacheControl,
		Expires:            opts.Expires,
	}
	if info.ContentType == "" {
		info.ContentType = "binary/octet-stream" // what S3 records
	}
	if len(opts.UserMetadata) > 0 {
		info.UserMetadata = make(map[string]string, len(opts.UserMetadata))
		for k, v := range opts.UserMetadata {
			info.UserMetadata[strings.ToLower(k)] = v
		}
	}
	return info
}

// Put implements store.Store.
func (s *Store) Put(ctx context.Context, bucketName, key string, r io.Reader, size int64, opts store.PutOptions) (store.PutResult, error) {
	if err := s.begin(ctx, "put", bucketName, key); err != nil {
		return store.PutResult{}, err
	}
	s.mu.Lock()
	_, err := s.bucketLocked(bucketName)
	s.mu.Unlock()
	if err != nil {
		return store.PutResult{}, wrap("put", bucketName, key, err)
	}
	data, md5sum, sum, algo, err := readBody(r, size, opts, "")
	if err == nil {
		err = ctx.Err()
	}
	if err != nil {
		return store.PutResult{}, wrap("put", bucketName, key, err)
	}
	info := infoFromPut(bucketName, key, opts)
	info.ETag = hex.EncodeToString(md5sum)
	if algo != "" {
		info.Checksums = map[string]string{string(algo): checksum.Encode(sum)}
		info.ChecksumType = "FULL_OBJECT"
	}
	if err := s.commitIf(bucketName, key, data, info, opts.IfMatch, opts.IfNoneMatch); err != nil {
		return store.PutResult{}, wrap("put", bucketName, key, err)
	}
	return store.PutResult{ETag: info.ETag, Checksums: maps.Clone(info.Checksums)}, nil
}

// checkWrite judges a write's conditions on the object it would replace.
// The caller holds s.mu.
func checkWrite(b *bucket, key, ifMatch, ifNoneMatch string) error {
	cur := b.objects[key]
	switch {
	case ifMatch != "" && cur == nil:
		return store.ErrNoSuchKey
	case ifMatch != "" && !etagMatches(ifMatch, cur.info.ETag):
		return store.ErrPreconditionFailed
	case ifNoneMatch != "" && cur != nil && etagMatches(ifNoneMatch, cur.info.ETag):
		return store.ErrPreconditionFailed
	}
	return nil
}

// commitIf stores a new version of an object, stamping its size and time,
// if the conditions allow (see checkWrite): If-Match on a missing object
// answers NoSuchKey, a failed condition ErrPreconditionFailed.
func (s *Store) commitIf(bucketName, key string, data []byte, info store.ObjectInfo, ifMatch, ifNoneMatch string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, err := s.bucketLocked(bucketName)
	if err != nil {
		return err // deleted while the body was read
	}
	if err := checkWrite(b, key, ifMatch, ifNoneMatch); err != nil {
		return err
	}
	info.Size = int64(len(data))
	info.LastModified = now()
	b.objects[key] = &object{data: data, info: info}
	return nil
}

// Delete implements store.Store.
func (s *Store) Delete(ctx context.Context, bucketName, key string) error {
	if err := s.begin(ctx, "delete", bucketName, key); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	b, err := s.bucketLocked(bucketName)
	if err != nil {
		return wrap("delete", bucketName, key, err)
	}
	delete(b.objects, key)
	return nil
}

// DeleteMany implements store.Store.
func (s *Store) DeleteMany(ctx context.Context, bucketName string, keys []string) (map[string]error, error) {
	if err := s.begin(ctx, "delete_many", bucketName, ""); err != nil {
		return nil, err
	}
	if len(keys) > 1000 {
		return nil, wrap("delete_many", bucketName, "", apiError("MalformedXML", http.StatusBadRequest, "%d keys: at most 1000 per request", len(keys)))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	b, err := s.bucketLocked(bucketName)
	if err != nil {
		return nil, wrap("delete_many", bucketName, "", err)
	}
	for _, k := range keys {
		delete(b.objects, k)
	}
	return map[string]error{}, nil
}

// Copy implements store.Store.
func (s *Store) Copy(ctx context.Context, src store.CopySource, dstBucket, dstKey string, opts store.CopyOptions) (store.CopyResult, error) {
	if err := s.begin(ctx, "copy", dstBucket, dstKey); err != nil {
		return store.CopyResult{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	fail := func(err error) (store.CopyResult, error) {
		return store.CopyResult{}, wrap("copy", dstBucket, dstKey, fmt.Errorf("from %s/%s: %w", src.Bucket, src.Key, err))
	}
	o, err := s.objectLocked(src.Bucket, src.Key)
	if err != nil {
		return fail(err)
	}
	if src.VersionID != "" && src.VersionID != "null" {
		return fail(store.ErrNoSuchKey) // the store keeps no versions
	}
	if src.IfMatch != "" && !etagMatches(src.IfMatch, o.info.ETag) {
		return fail(store.ErrPreconditionFailed)
	}
	if src.IfNoneMatch != "" && etagMatches(src.IfNoneMatch, o.info.ETag) {
		return fail(store.ErrPreconditionFailed)
	}
	b, err := s.bucketLocked(dstBucket)
	if err != nil {
		return fail(err)
	}
	if src.Bucket == dstBucket && src.Key == dstKey && !opts.ReplaceMetadata {
		return fail(apiError("InvalidRequest", http.StatusBadRequest,
			"This copy request is illegal because it is trying to copy an object to itself without changing the object's metadata."))
	}
	var info store.ObjectInfo
	if opts.ReplaceMetadata {
		info = infoFromPut(dstBucket, dstKey, opts.Metadata)
	} else {
		info = o.info
		info.Bucket, info.Key = dstBucket, dstKey
		info.UserMetadata = maps.Clone(o.info.UserMetadata)
	}
	// A copy is a single-part object: its ETag is the MD5 of its bytes,
	// and only full-object checksums still describe it.
	m := md5.Sum(o.data)
	info.ETag = hex.EncodeToString(m[:])
	info.Checksums, info.ChecksumType = nil, ""
	if o.info.ChecksumType == "FULL_OBJECT" {
		info.Checksums, info.ChecksumType = maps.Clone(o.info.Checksums), "FULL_OBJECT"
	}
	info.Size = o.info.Size
	info.LastModified = now()
	b.objects[dstKey] = &object{data: o.data, info: info}
	return store.CopyResult{ETag: info.ETag, LastModified: info.LastModified}, nil
}

// List implements store.Store.
func (s *Store) List(ctx context.Context, bucketName string, opts store.ListOptions) (store.ListResult, error) {
	if err := s.begin(ctx, "list", bucketName, ""); err != nil {
		return store.ListResult{}, err
	}
	marker := opts.StartAfter
	if !opts.V1 && opts.ContinuationToken != "" {
		t, err := base64.RawURLEncoding.DecodeString(opts.ContinuationToken)
		if err != nil {
			return store.ListResult{}, wrap("list", bucketName, "", apiError("InvalidArgument", http.StatusBadRequest, "The continuation token provided is incorrect"))
		}
		marker = string(t)
	}
	maxKeys := opts.MaxKeys
	if maxKeys <= 0 {
		maxKeys = defaultMaxKeys
	}

	s.mu.Lock()
	b, err := s.bucketLocked(bucketName)
	if err != nil {
		s.mu.Unlock()
		return store.ListResult{}, wrap("list", bucketName, "", err)
	}
	keys := make([]string, 0, len(b.objects))
	for k := range b.objects {
		if k > marker && strings.HasPrefix(k, opts.Prefix) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	var res store.ListResult
	last := "" // the last entry (key or common prefix) put on the page
	for _, k := range keys {
		entry, isPrefix := k, false
		if opts.Delimiter != "" {
			if i := strings.Index(k[len(opts.Prefix):], opts.Delimiter); i >= 0 {
				entry, isPrefix = k[:len(opts.Prefix)+i+len(opts.Delimiter)], true
			}
		}
		// A common prefix at or before the marker was on an earlier page.
		if entry == last || (isPrefix && entry <= marker) {
			continue
		}
		if len(res.Objects)+len(res.CommonPrefixes) == maxKeys {
			res.IsTruncated = true
			break
		}
		if isPrefix {
			res.CommonPrefixes = append(res.CommonPrefixes, entry)
		} else {
			o := b.objects[k]
			res.Objects = append(res.Objects, store.ObjectInfo{
				Bucket: bucketName, Key: k, Size: o.info.Size, ETag: o.info.ETag, LastModified: o.info.LastModified,
			})
		}
		last = entry
	}
	s.mu.Unlock()
	if res.IsTruncated {
		if opts.V1 {
			res.NextMarker = last
		} else {
			res.NextContinuationToken = base64.RawURLEncoding.EncodeToString([]byte(last))
		}
	}
	return res, nil
}

// ListBuckets implements store.Store.
func (s *Store) ListBuckets(ctx context.Context) ([]store.BucketInfo, error) {
	if err := s.begin(ctx, "list_buckets", "", ""); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]store.BucketInfo, 0, len(s.buckets))
	for name, b := range s.buckets {
		out = append(out, store.BucketInfo{Name: name, CreationDate: b.created})
	}
	slices.SortFunc(out, func(a, b store.BucketInfo) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// validBucketName applies S3's naming rules for general purpose buckets.
func validBucketName(name string) bool {
	if len(name) < 3 || len(name) > 63 || net.ParseIP(name) != nil {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case c == '-' || c == '.':
			if i == 0 || i == len(name)-1 {
				return false
			}
		default:
			return false
		}
	}
	return !strings.Contains(name, "..")
}

// CreateBucket implements store.Store. The region is ignored.
func (s *Store) CreateBucket(ctx context.Context, name, _ string) error {
	if err := s.begin(ctx, "create_bucket", name, ""); err != nil {
		return err
	}
	if !validBucketName(name) {
		return wrap("create_bucket", name, "", apiError("InvalidBucketName", http.StatusBadRequest, "The specified bucket is not valid."))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.buckets[name] != nil {
		return wrap("create_bucket", name, "", store.ErrBucketExists)
	}
	s.buckets[name] = &bucket{created: now(), objects: make(map[string]*object)}
	return nil
}

// HeadBucket implements store.Store.
func (s *Store) HeadBucket(ctx context.Context, name string) error {
	if err := s.begin(ctx, "head_bucket", name, ""); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := s.bucketLocked(name); err != nil {
		return wrap("head_bucket", name, "", err)
	}
	return nil
}

// DeleteBucket implements store.Store. Uploads in progress in the bucket
// are dropped with it.
func (s *Store) DeleteBucket(ctx context.Context, name string) error {
	if err := s.begin(ctx, "delete_bucket", name, ""); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	b, err := s.bucketLocked(name)
	if err != nil {
		return wrap("delete_bucket", name, "", err)
	}
	if len(b.objects) > 0 {
		return wrap("delete_bucket", name, "", store.ErrBucketNotEmpty)
	}
	delete(s.buckets, name)
	for id, u := range s.uploads {
		if u.bucket == name {
			delete(s.uploads, id)
		}
	}
	return nil
}
