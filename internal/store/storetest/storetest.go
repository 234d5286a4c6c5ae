// Package storetest is the conformance suite for store.Store backends: Run
// exercises every method against a real store and checks the behaviour
// hoard relies on (exact bytes, metadata, ranges, conditional reads, error
// sentinels, listing, multipart, checksums).
//
// Stores differ in a few corners S3 leaves open or that only some servers
// implement. Those corners are named in Capabilities; a backend declares
// what its store does and the suite then checks that exact behaviour,
// rather than skipping the check.
package storetest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/hoard-io/hoard/internal/store"
)

// Capabilities describe where a store legitimately differs from the
// strictest S3 behaviour. The zero value is MinIO/AWS behaviour.
type Capabilities struct {
	// StatMissingBucketIsNoSuchKey: a HEAD on an object of a missing
	// bucket has no body, and a store that does not name the error in a
	// header (MinIO's x-minio-error-code) can only be read as
	// ErrNoSuchKey. Get (with a body) must still say ErrNoSuchBucket.
	StatMissingBucketIsNoSuchKey bool
	// PartialConditionalPut: of a Put's conditions only If-Match with an
	// ETag and If-None-Match "*" (what AWS S3 documents) are judged
	// right; If-Match "*" and If-None-Match with an ETag are not.
	PartialConditionalPut bool
}

// Run runs the suite with strict (zero) Capabilities.
func Run(t *testing.T, newStore func(t *testing.T) store.Store) {
	RunWith(t, Capabilities{}, newStore)
}

// RunWith runs the suite. newStore returns a store for one subtest; the
// suite creates (and removes) its own uniquely named buckets in it.
func RunWith(t *testing.T, caps Capabilities, newStore func(t *testing.T) store.Store) {
	tests := []struct {
		name string
		fn   func(t *testing.T, st store.Store, caps Capabilities)
	}{
		{"RoundTrip", testRoundTrip},
		{"UnknownSize", testUnknownSize},
		{"Metadata", testMetadata},
		{"Ranges", testRanges},
		{"Conditional", testConditional},
		{"ConditionalPut", testConditionalPut},
		{"ConditionalComplete", testConditionalComplete},
		{"Missing", testMissing},
		{"ListPagination", testListPagination},
		{"OddKeys", testOddKeys},
		{"DeleteMany", testDeleteMany},
		{"Copy", testCopy},
		{"Multipart", testMultipart},
		{"MultipartAbort", testMultipartAbort},
		{"Buckets", testBuckets},
		{"Checksums", testChecksums},
		{"MultipartChecksums", testMultipartChecksums},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, newStore(t), caps)
		})
	}
}

// ctxFor bounds one subtest's requests so a hung store fails the test
// instead of the whole run.
func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// newBucket creates a uniquely named bucket and removes it (with whatever
// the test left in it) when the test ends.
func newBucket(t *testing.T, st store.Store) string {
	t.Helper()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name := "hoard-test-" + hex.EncodeToString(b)
	ctx := ctxFor(t)
	if err := st.CreateBucket(ctx, name, ""); err != nil {
		t.Fatalf("CreateBucket(%s): %v", name, err)
	}
	t.Cleanup(func() { emptyAndDelete(t, st, name) })
	return name
}

func emptyAndDelete(t *testing.T, st store.Store, bucket string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	token := ""
	for {
		res, err := st.List(ctx, bucket, store.ListOptions{ContinuationToken: token})
		if err != nil {
			t.Logf("cleanup: list %s: %v", bucket, err)
			return
		}
		keys := make([]string, 0, len(res.Objects))
		for _, o := range res.Objects {
			keys = append(keys, o.Key)
		}
		if len(keys) > 0 {
			if _, err := st.DeleteMany(ctx, bucket, keys); err != nil {
				t.Logf("cleanup: delete in %s: %v", bucket, err)
				return
			}
		}
		if !res.IsTruncated {
			break
		}
		token = res.NextContinuationToken
	}
	if err := st.DeleteBucket(ctx, bucket); err != nil {
		t.Logf("cleanup: delete bucket %s: %v", bucket, err)
	}
}

// randomBytes returns n bytes that will not compress or repeat.
func randomBytes(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return b
}

func put(t *testing.T, st store.Store, bucket, key string, data []byte, opts store.PutOptions) store.PutResult {
	t.Helper()
	res, err := st.Put(ctxFor(t), bucket, key, bytes.NewReader(data), int64(len(data)), opts)
	if err != nil {
		t.Fatalf("Put(%s/%q, %d bytes): %v", bucket, key, len(data), err)
	}
	if res.ETag == "" || strings.Contains(res.ETag, `"`) {
		t.Fatalf("Put(%s/%q): ETag %q: want a bare, non-empty ETag", bucket, key, res.ETag)
	}
	return res
}

// get reads a whole Get and returns its body and info.
func get(t *testing.T, st store.Store, bucket, key string, opts store.GetOptions) ([]byte, store.ObjectInfo, *store.ByteRange) {
	t.Helper()
	body, info, rng, err := st.Get(ctxFor(t), bucket, key, opts)
	if err != nil {
		t.Fatalf("Get(%s/%q, %+v): %v", bucket, key, opts, err)
	}
	defer body.Close()
	data, err := io.ReadAll(body)
	if err != nil {
		t.Fatalf("Get(%s/%q): read body: %v", bucket, key, err)
	}
	return data, info, rng
}

// wantErr fails unless err is target.
func wantErr(t *testing.T, what string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%s: error %v, want %v", what, err, target)
	}
}

// wantGetErr checks that a Get fails with target and moves no body.
func wantGetErr(t *testing.T, st store.Store, bucket, key string, opts store.GetOptions, target error) {
	t.Helper()
	body, _, _, err := st.Get(ctxFor(t), bucket, key, opts)
	if body != nil {
		body.Close()
		t.Errorf("Get(%s/%q, %+v): got a body with error %v", bucket, key, opts, err)
	}
	wantErr(t, "Get("+bucket+"/"+key+")", err, target)
}

func testRoundTrip(t *testing.T, st store.Store, _ Capabilities) {
	bucket := newBucket(t, st)
	for _, tc := range []struct {
		name string
		size int
	}{
		{"empty", 0},
		{"one byte", 1},
		{"5MiB+1", 5<<20 + 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := randomBytes(tc.size)
			key := "obj-" + strings.ReplaceAll(tc.name, " ", "-")
			pr := put(t, st, bucket, key, data, store.PutOptions{})
			got, info, rng := get(t, st, bucket, key, store.GetOptions{})
			if !bytes.Equal(got, data) {
				t.Fatalf("Get returned %d bytes, want the %d put", len(got), len(data))
			}
			if rng != nil {
				t.Errorf("whole-object Get: range %+v, want nil", *rng)
			}
			if info.Size != int64(tc.size) || info.ETag != pr.ETag || info.Bucket != bucket || info.Key != key {
				t.Errorf("Get info = %+v, want size %d etag %q", info, tc.size, pr.ETag)
			}
			if info.LastModified.IsZero() || time.Since(info.LastModified) > time.Hour {
				t.Errorf("Get LastModified = %v", info.LastModified)
			}
			st2, err := st.Stat(ctxFor(t), bucket, key)
			if err != nil {
				t.Fatalf("Stat: %v", err)
			}
			if st2.Size != int64(tc.size) || st2.ETag != pr.ETag {
				t.Errorf("Stat = size %d etag %q, want %d %q", st2.Size, st2.ETag, tc.size, pr.ETag)
			}
		})
	}
}

// testUnknownSize: a body of unknown length (size -1) still arrives whole.
func testUnknownSize(t *testing.T, st store.Store, _ Capabilities) {
	bucket := newBucket(t, st)
	data := randomBytes(100 << 10)
	opts := store.PutOptions{ContentType: "application/x-unknown", UserMetadata: map[string]string{"k": "v"}}
	if _, err := st.Put(ctxFor(t), bucket, "unknown", io.MultiReader(bytes.NewReader(data)), -1, opts); err != nil {
		t.Fatalf("Put(size -1): %v", err)
	}
	got, info, _ := get(t, st, bucket, "unknown", store.GetOptions{})
	if !bytes.Equal(got, data) || info.Size != int64(len(data)) {
		t.Fatalf("Get after Put(size -1): %d bytes (size %d), want %d", len(got), info.Size, len(data))
	}
	checkMetadata(t, "Put(size -1)", info, opts)
}

func testMetadata(t *testing.T, st store.Store, _ Capabilities) {
	bucket := newBucket(t, st)
	opts := store.PutOptions{
		ContentType:        "text/plain; charset=utf-8",
		ContentEncoding:    "identity",
		ContentDisposition: `attachment; filename="a.txt"`,
		ContentLanguage:    "en-GB",
		CacheControl:       "max-age=60",
		Expires:            "Wed, 21 Oct 2037 07:28:00 GMT",
		UserMetadata:       map[string]string{"color": "blue", "Mixed-Case": "Value With Spaces"},
	}
	put(t, st, bucket, "meta", []byte("hello"), opts)
	_, gi, _ := get(t, st, bucket, "meta", store.GetOptions{})
	si, err := st.Stat(ctxFor(t), bucket, "meta")
	if err != nil {
		t.Fatalf("Stat: %v", err)
	}
	for _, info := range []struct {
		how  string
		info store.ObjectInfo
	}{{"Get", gi}, {"Stat", si}} {
		checkMetadata(t, info.how, info.info, opts)
	}
	// Without a Content-Type the object gets S3's default.
	put(t, st, bucket, "untyped", []byte("hello"), store.PutOptions{})
	if si, err := st.Stat(ctxFor(t), bucket, "untyped"); err != nil || si.ContentType != "binary/octet-stream" {
		t.Errorf("Stat of an object written without a Content-Type: %q, %v; want binary/octet-stream", si.ContentType, err)
	}
}

// checkMetadata compares what the store reports with what was written.
func checkMetadata(t *testing.T, how string, got store.ObjectInfo, want store.PutOptions) {
	t.Helper()
	for _, f := range []struct{ name, got, want string }{
		{"ContentType", got.ContentType, want.ContentType},
		{"ContentEncoding", got.ContentEncoding, want.ContentEncoding},
		{"ContentDisposition", got.ContentDisposition, want.ContentDisposition},
		{"ContentLanguage", got.ContentLanguage, want.ContentLanguage},
		{"CacheControl", got.CacheControl, want.CacheControl},
		{"Expires", got.Expires, want.Expires},
	} {
		if f.got != f.want {
			t.Errorf("%s: %s = %q, want %q", how, f.name, f.got, f.want)
		}
	}
	for k, v := range want.UserMetadata {
		if g := got.UserMetadata[strings.ToLower(k)]; g != v {
			t.Errorf("%s: UserMetadata[%q] = %q, want %q (all: %v)", how, strings.ToLower(k), g, v, got.UserMetadata)
		}
	}
	if len(got.UserMetadata) != len(want.UserMetadata) {
		t.Errorf("%s: UserMetadata = %v, want %v", how, got.UserMetadata, want.UserMetadata)
	}
}

func testRanges(t *testing.T, st store.Store, _ Capabilities) {
	bucket := newBucket(t, st)
	data := randomBytes(100)
	put(t, st, bucket, "r", data, store.PutOptions{})
	for _, tc := range []struct {
		name       string
		req        store.ByteRange
		start, end int64 // resolved, inclusive
	}{
		{"closed", store.ByteRange{Start: 10, End: 19}, 10, 19},
		{"first byte", store.ByteRange{Start: 0, End: 0}, 0, 0},
		{"last byte", store.ByteRange{Start: 99, End: 99}, 99, 99},
		{"open", store.ByteRange{Start: 90, End: -1}, 90, 99},
		{"suffix", store.ByteRange{Start: -10, End: -1}, 90, 99},
		{"suffix longer than object", store.ByteRange{Start: -500, End: -1}, 0, 99},
		{"end past object", store.ByteRange{Start: 95, End: 500}, 95, 99},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := tc.req
			got, info, rng := get(t, st, bucket, "r", store.GetOptions{Range: &r})
			if info.Size != 100 {
				t.Errorf("Size = %d, want the whole object's 100", info.Size)
			}
			if rng == nil || rng.Start != tc.start || rng.End != tc.end {
				t.Errorf("range = %+v, want %d-%d", rng, tc.start, tc.end)
			}
			if !bytes.Equal(got, data[tc.start:tc.end+1]) {
				t.Errorf("body = %d bytes, want bytes %d-%d", len(got), tc.start, tc.end)
			}
		})
	}
	for _, tc := range []struct {
		name string
		req  store.ByteRange
	}{
		{"start at size", store.ByteRange{Start: 100, End: -1}},
		{"start past size", store.ByteRange{Start: 200, End: 300}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := tc.req
			wantGetErr(t, st, bucket, "r", store.GetOptions{Range: &r}, store.ErrInvalidRange)
		})
	}
}

func testConditional(t *testing.T, st store.Store, _ Capabilities) {
	bucket := newBucket(t, st)
	data := []byte("conditional body")
	pr := put(t, st, bucket, "c", data, store.PutOptions{})
	other := "0123456789abcdef0123456789abcdef"

	wantGetErr(t, st, bucket, "c", store.GetOptions{IfNoneMatch: pr.ETag}, store.ErrNotModified)
	wantGetErr(t, st, bucket, "c", store.GetOptions{IfNoneMatch: `"` + pr.ETag + `"`}, store.ErrNotModified)
	wantGetErr(t, st, bucket, "c", store.GetOptions{IfMatch: other}, store.ErrPreconditionFailed)

	for _, opts := range []store.GetOptions{
		{IfNoneMatch: other},
		{IfMatch: pr.ETag},
		{IfMatch: pr.ETag, IfNoneMatch: other},
	} {
		got, info, _ := get(t, st, bucket, "c", opts)
		if !bytes.Equal(got, data) || info.ETag != pr.ETag {
			t.Errorf("Get(%+v) = %q etag %q, want the object", opts, got, info.ETag)
		}
	}
	// A conditional ranged read: the cache revalidates a range.
	r := store.ByteRange{Start: 0, End: 3}
	wantGetErr(t, st, bucket, "c", store.GetOptions{Range: &r, IfNoneMatch: pr.ETag}, store.ErrNotModified)
}

// testConditionalPut: If-Match and If-None-Match on Put, as S3 and MinIO
// judge them; a refused write commits nothing.
func testConditionalPut(t *testing.T, st store.Store, caps Capabilities) {
	bucket := newBucket(t, st)
	ctx := ctxFor(t)
	try := func(data string, opts store.PutOptions) error {
		_, err := st.Put(ctx, bucket, "c", strings.NewReader(data), int64(len(data)), opts)
		return err
	}
	other := "0123456789abcdef0123456789abcdef"
	wantErr(t, "If-Match on a missing object", try("x", store.PutOptions{IfMatch: other}), store.ErrNoSuchKey)
	if err := try("v1", store.PutOptions{IfNoneMatch: "*"}); err != nil {
		t.Fatalf("If-None-Match * on a missing object: %v", err)
	}
	v1, _, _ := get(t, st, bucket, "c", store.GetOptions{})
	info, err := st.Stat(ctx, bucket, "c")
	if err != nil {
		t.Fatal(err)
	}
	refused := []store.PutOptions{{IfMatch: other}, {IfMatch: `"` + other + `"`}, {IfNoneMatch: "*"}}
	accepted := []store.PutOptions{{IfMatch: info.ETag}}
	if !caps.PartialConditionalPut {
		refused = append(refused, store.PutOptions{IfNoneMatch: info.ETag})
		accepted = append(accepted, store.PutOptions{IfMatch: "*"}, store.PutOptions{IfNoneMatch: other})
	}
	for _, opts := range refused {
		wantErr(t, fmt.Sprintf("Put(%+v)", opts), try("v2", opts), store.ErrPreconditionFailed)
		if got, _, _ := get(t, st, bucket, "c", store.GetOptions{}); !bytes.Equal(got, v1) {
			t.Fatalf("Put(%+v) refused, but the object is now %q", opts, got)
		}
	}
	for _, opts := range accepted {
		if err := try("v3", opts); err != nil {
			t.Fatalf("Put(%+v): %v", opts, err)
		}
	}
}

// testConditionalComplete: the conditions of CompleteMultipartUpload, as
// of Put; a refused completion commits nothing.
func testConditionalComplete(t *testing.T, st store.Store, _ Capabilities) {
	bucket := newBucket(t, st)
	ctx := ctxFor(t)
	pr := put(t, st, bucket, "mc", []byte("v1"), store.PutOptions{})
	id, err := st.CreateMultipartUpload(ctx, bucket, "mc", store.PutOptions{})
	if err != nil {
		t.Fatalf("CreateMultipartUpload: %v", err)
	}
	defer func() { _ = st.AbortMultipartUpload(ctx, bucket, "mc", id) }()
	part, err := st.UploadPart(ctx, bucket, "mc", id, 1, strings.NewReader("v2"), 2, store.PutOptions{})
	if err != nil {
		t.Fatalf("UploadPart: %v", err)
	}
	_, err = st.CompleteMultipartUpload(ctx, bucket, "mc", id, []store.Part{part}, store.CompleteOptions{IfNoneMatch: "*"})
	wantErr(t, "Complete(If-None-Match *)", err, store.ErrPreconditionFailed)
	_, err = st.CompleteMultipartUpload(ctx, bucket, "mc", id, []store.Part{part}, store.CompleteOptions{IfMatch: "0123456789abcdef0123456789abcdef"})
	wantErr(t, "Complete(If-Match other)", err, store.ErrPreconditionFailed)
	if got, _, _ := get(t, st, bucket, "mc", store.GetOptions{}); string(got) != "v1" {
		t.Fatalf("refused completions left %q", got)
	}
	if _, err := st.CompleteMultipartUpload(ctx, bucket, "mc", id, []store.Part{part}, store.CompleteOptions{IfMatch: pr.ETag}); err != nil {
		t.Fatalf("Complete(If-Match current): %v", err)
	}
	if got, _, _ := get(t, st, bucket, "mc", store.GetOptions{}); string(got) != "v2" {
		t.Fatalf("completed object is %q", got)
	}
}

func testMissing(t *testing.T, st store.Store, caps Capabilities) {
	bucket := newBucket(t, st)
	ctx := ctxFor(t)
	gone := bucket + "-missing"

	wantGetErr(t, st, bucket, "nope", store.GetOptions{}, store.ErrNoSuchKey)
	_, err := st.Stat(ctx, bucket, "nope")
	wantErr(t, "Stat(missing key)", err, store.ErrNoSuchKey)
	wantGetErr(t, st, gone, "k", store.GetOptions{}, store.ErrNoSuchBucket)

	_, err = st.Stat(ctx, gone, "k")
	if caps.StatMissingBucketIsNoSuchKey {
		wantErr(t, "Stat(missing bucket)", err, store.ErrNoSuchKey)
	} else {
		wantErr(t, "Stat(missing bucket)", err, store.ErrNoSuchBucket)
	}
	_, err = st.List(ctx, gone, store.ListOptions{})
	wantErr(t, "List(missing bucket)", err, store.ErrNoSuchBucket)
	_, err = st.List(ctx, gone, store.ListOptions{V1: true})
	wantErr(t, "List V1(missing bucket)", err, store.ErrNoSuchBucket)
	wantErr(t, "HeadBucket(missing)", st.HeadBucket(ctx, gone), store.ErrNoSuchBucket)
	wantErr(t, "DeleteBucket(missing)", st.DeleteBucket(ctx, gone), store.ErrNoSuchBucket)
	_, err = st.Put(ctx, gone, "k", strings.NewReader("x"), 1, store.PutOptions{})
	wantErr(t, "Put(missing bucket)", err, store.ErrNoSuchBucket)

	if err := st.Delete(ctx, bucket, "never-existed"); err != nil {
		t.Errorf("Delete(missing key) = %v, want nil", err)
	}
}
