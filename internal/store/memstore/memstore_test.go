package memstore

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"

	"github.com/hoard-io/hoard/internal/store"
	"github.com/hoard-io/hoard/internal/store/storetest"
)

// TestConformance runs the store conformance suite: memstore must behave
// as the real stores do wherever hoard relies on it.
func TestConformance(t *testing.T) {
	storetest.Run(t, func(*testing.T) store.Store { return New() })
}

// newStoreWithBucket returns a store holding one empty bucket, "bkt".
func newStoreWithBucket(t *testing.T) *Store {
	t.Helper()
	s := New()
	if err := s.CreateBucket(t.Context(), "bkt", ""); err != nil {
		t.Fatal(err)
	}
	return s
}

func mustPut(t *testing.T, s *Store, key string, data []byte) store.PutResult {
	t.Helper()
	res, err := s.Put(t.Context(), "bkt", key, bytes.NewReader(data), int64(len(data)), store.PutOptions{})
	if err != nil {
		t.Fatalf("Put(%q): %v", key, err)
	}
	return res
}

func readAllClose(t *testing.T, rc io.ReadCloser) []byte {
	t.Helper()
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("read body: %v", err)
	}
	return b
}

func md5hex(b []byte) string {
	m := md5.Sum(b)
	return hex.EncodeToString(m[:])
}

func TestPutETagIsMD5(t *testing.T) {
	s := newStoreWithBucket(t)
	for _, data := range [][]byte{nil, []byte("x"), bytes.Repeat([]byte("abc"), 1000)} {
		res := mustPut(t, s, "k", data)
		if want := md5hex(data); res.ETag != want {
			t.Errorf("Put(%d bytes) ETag = %q, want %q", len(data), res.ETag, want)
		}
	}
}

func TestPutBodyLength(t *testing.T) {
	s := newStoreWithBucket(t)
	ctx := t.Context()
	for _, tc := range []struct {
		name    string
		body    string
		size    int64
		wantErr bool
	}{
		{"exact", "hello", 5, false},
		{"unknown size", "hello", -1, false},
		{"short", "hell", 5, true},
		{"long", "hello!", 5, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := "len-" + strings.ReplaceAll(tc.name, " ", "-")
			_, err := s.Put(ctx, "bkt", key, strings.NewReader(tc.body), tc.size, store.PutOptions{})
			var apiErr *store.APIError
			if tc.wantErr != (err != nil) || (err != nil && (!errors.As(err, &apiErr) || apiErr.StatusCode != 400)) {
				t.Fatalf("Put(%q, size %d) = %v, want error %v (a 400 APIError)", tc.body, tc.size, err, tc.wantErr)
			}
			_, err = s.Stat(ctx, "bkt", key)
			if tc.wantErr != errors.Is(err, store.ErrNoSuchKey) {
				t.Errorf("Stat after Put: %v; a rejected Put must store nothing, an accepted one must", err)
			}
		})
	}
}

// A body that fails while being read (a signature or checksum check above
// the store) must not be committed.
func TestPutBodyReadErrorCommitsNothing(t *testing.T) {
	s := newStoreWithBucket(t)
	bad := errors.New("signature mismatch")
	r := io.MultiReader(strings.NewReader("half"), &errReader{bad})
	_, err := s.Put(t.Context(), "bkt", "k", r, 8, store.PutOptions{})
	if !errors.Is(err, bad) {
		t.Fatalf("Put = %v, want the body's error", err)
	}
	if _, err := s.Stat(t.Context(), "bkt", "k"); !errors.Is(err, store.ErrNoSuchKey) {
		t.Errorf("Stat = %v, want ErrNoSuchKey", err)
	}
}

type errReader struct{ err error }

func (r *errReader) Read([]byte) (int, error) { return 0, r.err }

func TestMultipartETagAndSizes(t *testing.T) {
	big := bytes.Repeat([]byte{'a'}, MinPartSize)
	small := []byte("tail")
	for _, tc := range []struct {
		name     string
		parts    [][]byte
		wantCode string // "" for success
	}{
		{"one small part", [][]byte{small}, ""},
		{"big then small", [][]byte{big, small}, ""},
		{"big big small", [][]byte{big, big, small}, ""},
		{"small then big", [][]byte{small, big}, "EntityTooSmall"},
		{"one byte short", [][]byte{big[:MinPartSize-1], small}, "EntityTooSmall"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newStoreWithBucket(t)
			ctx := t.Context()
			id, err := s.CreateMultipartUpload(ctx, "bkt", "mp", store.PutOptions{ContentType: "x/y"})
			if err != nil {
				t.Fatal(err)
			}
			var parts []store.Part
			var md5s []byte
			for i, data := range tc.parts {
				p, err := s.UploadPart(ctx, "bkt", "mp", id, i+1, bytes.NewReader(data), int64(len(data)), store.PutOptions{})
				if err != nil {
					t.Fatalf("UploadPart(%d): %v", i+1, err)
				}
				if p.ETag != md5hex(data) {
					t.Errorf("part %d ETag = %q, want its MD5", i+1, p.ETag)
				}
				parts = append(parts, p)
				m := md5.Sum(data)
				md5s = append(md5s, m[:]...)
			}
			res, err := s.CompleteMultipartUpload(ctx, "bkt", "mp", id, parts, store.CompleteOptions{})
			if tc.wantCode != "" {
				var apiErr *store.APIError
				if !errors.As(err, &apiErr) || apiErr.Code != tc.wantCode || apiErr.StatusCode != 400 {
					t.Fatalf("Complete = %v, want APIError %s (400)", err, tc.wantCode)
				}
				// A refused completion leaves the upload open.
				if _, err := s.ListParts(ctx, "bkt", "mp", id, 0, 0); err != nil {
					t.Errorf("ListParts after a refused Complete: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Complete: %v", err)
			}
			want := fmt.Sprintf("%s-%d", md5hex(md5s), len(tc.parts))
			if res.ETag != want {
				t.Errorf("ETag = %q, want %q (MD5 of the parts' MD5s)", res.ETag, want)
			}
			body, info, _, err := s.Get(ctx, "bkt", "mp", store.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if got := readAllClose(t, body); !bytes.Equal(got, bytes.Join(tc.parts, nil)) {
				t.Errorf("object is %d bytes, want the parts' concatenation", len(got))
			}
			if info.ETag != want || info.ContentType != "x/y" {
				t.Errorf("info = %+v, want ETag %q and the upload's content type", info, want)
			}
		})
	}
}

func TestMultipartCompleteErrors(t *testing.T) {
	s := newStoreWithBucket(t)
	ctx := t.Context()
	id, err := s.CreateMultipartUpload(ctx, "bkt", "mp", store.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	big := bytes.Repeat([]byte{'z'}, MinPartSize)
	p1, err := s.UploadPart(ctx, "bkt", "mp", id, 1, bytes.NewReader(big), int64(len(big)), store.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p2, err := s.UploadPart(ctx, "bkt", "mp", id, 2, strings.NewReader("end"), 3, store.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	wrongETag := p2
	wrongETag.ETag = md5hex([]byte("other"))
	for _, tc := range []struct {
		name  string
		parts []store.Part
		code  string
	}{
		{"none", nil, "MalformedXML"},
		{"out of order", []store.Part{p2, p1}, "InvalidPartOrder"},
		{"unknown part", []store.Part{p1, {PartNumber: 3, ETag: p2.ETag}}, "InvalidPart"},
		{"wrong etag", []store.Part{p1, wrongETag}, "InvalidPart"},
	} {
		_, err := s.CompleteMultipartUpload(ctx, "bkt", "mp", id, tc.parts, store.CompleteOptions{})
		var apiErr *store.APIError
		if !errors.As(err, &apiErr) || apiErr.Code != tc.code {
			t.Errorf("%s: Complete = %v, want APIError %s", tc.name, err, tc.code)
		}
	}
	// Quoted ETags, as clients send them, are accepted.
	p1.ETag = `"` + p1.ETag + `"`
	if _, err := s.CompleteMultipartUpload(ctx, "bkt", "mp", id, []store.Part{p1, p2}, store.CompleteOptions{}); err != nil {
		t.Fatalf("Complete with quoted ETags: %v", err)
	}
	_, err = s.UploadPart(ctx, "bkt", "mp", id, 3, strings.NewReader("x"), 1, store.PutOptions{})
	if !errors.Is(err, store.ErrNoSuchUpload) {
		t.Errorf("UploadPart after Complete = %v, want ErrNoSuchUpload", err)
	}
}

func TestGetCounts(t *testing.T) {
	s := newStoreWithBucket(t)
	ctx := t.Context()
	etag := mustPut(t, s, "k", []byte("0123456789")).ETag
	rng := &store.ByteRange{Start: 2, End: 4}
	steps := []struct {
		opts    store.GetOptions
		key     string
		wantErr error
	}{
		{store.GetOptions{}, "k", nil},
		{store.GetOptions{IfNoneMatch: etag}, "k", store.ErrNotModified},
		{store.GetOptions{IfNoneMatch: "other"}, "k", nil},
		{store.GetOptions{Range: rng}, "k", nil},
		{store.GetOptions{IfMatch: "other"}, "k", store.ErrPreconditionFailed},
		{store.GetOptions{}, "missing", store.ErrNoSuchKey},
	}
	for _, st := range steps {
		body, _, _, err := s.Get(ctx, "bkt", st.key, st.opts)
		if !errors.Is(err, st.wantErr) || (err == nil) != (st.wantErr == nil) {
			t.Fatalf("Get(%q, %+v) = %v, want %v", st.key, st.opts, err, st.wantErr)
		}
		if body != nil {
			body.Close()
		}
	}
	want := GetCounts{Total: 6, Conditional: 3, NotModified: 1, Bodies: 3, FullBodies: 2, Ranged: 1}
	if got := s.GetCounts(); got != want {
		t.Errorf("GetCounts = %+v, want %+v", got, want)
	}
	if got := s.Calls(OpGet); got != 6 {
		t.Errorf("Calls(get) = %d, want 6", got)
	}
	if got := s.Calls(OpPut); got != 1 {
		t.Errorf("Calls(put) = %d, want 1", got)
	}
	s.ResetCounts()
	if got := s.GetCounts(); got != (GetCounts{}) || s.Calls(OpGet) != 0 {
		t.Errorf("after ResetCounts: %+v, %d gets", got, s.Calls(OpGet))
	}
}

// A body keeps reading the version it opened, whatever is written after.
func TestBodyOutlivesOverwrite(t *testing.T) {
	s := newStoreWithBucket(t)
	mustPut(t, s, "k", []byte("old version"))
	body, info, _, err := s.Get(t.Context(), "bkt", "k", store.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	mustPut(t, s, "k", []byte("new version!"))
	if err := s.Delete(t.Context(), "bkt", "k"); err != nil {
		t.Fatal(err)
	}
	if got := readAllClose(t, body); string(got) != "old version" || info.ETag != md5hex(got) {
		t.Errorf("body = %q (etag %q), want the version opened", got, info.ETag)
	}
}

func TestHoldBody(t *testing.T) {
	s := newStoreWithBucket(t)
	mustPut(t, s, "k", []byte("0123456789"))
	h := s.HoldBody("bkt", "k", 4)
	body, _, _, err := s.Get(t.Context(), "bkt", "k", store.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan []byte)
	go func() {
		b, _ := io.ReadAll(body)
		got <- b
	}()
	<-h.Reached()
	select {
	case b := <-got:
		t.Fatalf("body finished (%q) while held", b)
	default:
	}
	// A Get opened while the hold is in place, but of another object, passes.
	mustPut(t, s, "other", []byte("free"))
	other, _, _, err := s.Get(t.Context(), "bkt", "other", store.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if b := readAllClose(t, other); string(b) != "free" {
		t.Errorf("other = %q", b)
	}
	h.Release()
	if b := <-got; string(b) != "0123456789" {
		t.Errorf("held body = %q, want every byte in order", b)
	}
	// Bodies opened after Release are not held.
	body2, _, _, err := s.Get(t.Context(), "bkt", "k", store.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if b := readAllClose(t, body2); string(b) != "0123456789" {
		t.Errorf("body after release = %q", b)
	}
}

func TestHoldBodyUnblocksOnClose(t *testing.T) {
	s := newStoreWithBucket(t)
	mustPut(t, s, "k", []byte("0123456789"))
	h := s.HoldBody("bkt", "k", 0)
	defer h.Release()
	body, _, _, err := s.Get(t.Context(), "bkt", "k", store.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error)
	go func() {
		_, err := body.Read(make([]byte, 4))
		done <- err
	}()
	<-h.Reached()
	body.Close()
	if err := <-done; !errors.Is(err, errBodyClosed) {
		t.Errorf("Read after Close = %v, want errBodyClosed", err)
	}
}

func TestHoldGetFixesTheVersion(t *testing.T) {
	s := newStoreWithBucket(t)
	mustPut(t, s, "k", []byte("v1"))
	h := s.HoldGet("bkt", "k")
	type answer struct {
		data []byte
		err  error
	}
	got := make(chan answer)
	go func() {
		body, _, _, err := s.Get(t.Context(), "bkt", "k", store.GetOptions{})
		if err != nil {
			got <- answer{err: err}
			return
		}
		b, err := io.ReadAll(body)
		body.Close()
		got <- answer{b, err}
	}()
	<-h.Reached()
	mustPut(t, s, "k", []byte("v2"))
	h.Release()
	if a := <-got; a.err != nil || string(a.data) != "v1" {
		t.Errorf("held Get = %q, %v; want v1, decided before the overwrite", a.data, a.err)
	}
}

func TestHoldGetHonoursContext(t *testing.T) {
	s := newStoreWithBucket(t)
	mustPut(t, s, "k", []byte("v1"))
	h := s.HoldGet("bkt", "k")
	defer h.Release()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error)
	go func() {
		body, _, _, err := s.Get(ctx, "bkt", "k", store.GetOptions{})
		if err == nil {
			_, err = io.ReadAll(body)
			body.Close()
		}
		done <- err
	}()
	<-h.Reached()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled held Get = %v, want context.Canceled", err)
	}
}

func TestBreakBody(t *testing.T) {
	s := newStoreWithBucket(t)
	mustPut(t, s, "k", []byte("0123456789"))
	broken := errors.New("connection reset")
	s.BreakBody("bkt", "k", 3, broken)
	body, _, _, err := s.Get(t.Context(), "bkt", "k", store.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(body)
	body.Close()
	if string(got) != "012" || !errors.Is(err, broken) {
		t.Errorf("broken body = %q, %v; want 3 bytes then the error", got, err)
	}
	// The break applied once.
	body, _, _, err = s.Get(t.Context(), "bkt", "k", store.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := readAllClose(t, body); string(got) != "0123456789" {
		t.Errorf("next body = %q, want it whole", got)
	}
}

func TestDown(t *testing.T) {
	s := newStoreWithBucket(t)
	ctx := t.Context()
	mustPut(t, s, "k", []byte("data"))
	open, _, _, err := s.Get(ctx, "bkt", "k", store.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.SetDown(true)
	calls := map[string]func() error{
		OpGet: func() error {
			_, _, _, err := s.Get(ctx, "bkt", "k", store.GetOptions{})
			return err
		},
		OpStat: func() error { _, err := s.Stat(ctx, "bkt", "k"); return err },
		OpPut: func() error {
			_, err := s.Put(ctx, "bkt", "k2", strings.NewReader("x"), 1, store.PutOptions{})
			return err
		},
		OpDelete:     func() error { return s.Delete(ctx, "bkt", "k") },
		OpList:       func() error { _, err := s.List(ctx, "bkt", store.ListOptions{}); return err },
		OpHeadBucket: func() error { return s.HeadBucket(ctx, "bkt") },
		OpCreateMultipart: func() error {
			_, err := s.CreateMultipartUpload(ctx, "bkt", "k", store.PutOptions{})
			return err
		},
	}
	for op, call := range calls {
		if err := call(); !errors.Is(err, store.ErrUnavailable) {
			t.Errorf("%s while down = %v, want ErrUnavailable", op, err)
		}
	}
	// A body opened before the store went down still reads.
	if got := readAllClose(t, open); string(got) != "data" {
		t.Errorf("open body = %q", got)
	}
	s.SetDown(false)
	if _, err := s.Stat(ctx, "bkt", "k"); err != nil {
		t.Errorf("Stat when back up: %v (nothing may have changed while down)", err)
	}
}

func TestReturnedMapsAreCopies(t *testing.T) {
	s := newStoreWithBucket(t)
	ctx := t.Context()
	meta := map[string]string{"a": "1"}
	if _, err := s.Put(ctx, "bkt", "k", strings.NewReader("x"), 1, store.PutOptions{UserMetadata: meta, ChecksumAlgorithm: "CRC32"}); err != nil {
		t.Fatal(err)
	}
	meta["a"] = "changed by caller"
	info, err := s.Stat(ctx, "bkt", "k")
	if err != nil {
		t.Fatal(err)
	}
	info.UserMetadata["a"] = "changed again"
	info.Checksums["CRC32"] = "bogus"
	info, err = s.Stat(ctx, "bkt", "k")
	if err != nil {
		t.Fatal(err)
	}
	if info.UserMetadata["a"] != "1" || info.Checksums["CRC32"] == "bogus" {
		t.Errorf("stored info was changed through a caller's map: %+v", info)
	}
}

func TestChecksumsOnlyWhenAsked(t *testing.T) {
	s := newStoreWithBucket(t)
	ctx := t.Context()
	if _, err := s.Put(ctx, "bkt", "k", strings.NewReader("abc"), 3, store.PutOptions{ChecksumAlgorithm: "SHA256"}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		opts store.GetOptions
		want bool
	}{
		{store.GetOptions{}, false},
		{store.GetOptions{ChecksumMode: true}, true},
		{store.GetOptions{ChecksumMode: true, Range: &store.ByteRange{Start: 0, End: 0}}, false},
	} {
		body, info, _, err := s.Get(ctx, "bkt", "k", tc.opts)
		if err != nil {
			t.Fatal(err)
		}
		body.Close()
		if got := info.Checksums["SHA256"] != ""; got != tc.want || (tc.want && info.ChecksumType != "FULL_OBJECT") {
			t.Errorf("Get(%+v): checksums %v type %q, want present=%v", tc.opts, info.Checksums, info.ChecksumType, tc.want)
		}
	}
}

// TestListV1DelimiterPages checks that a common prefix is listed once even
// when a page ends on it.
func TestListV1DelimiterPages(t *testing.T) {
	s := newStoreWithBucket(t)
	for _, k := range []string{"a/1", "a/2", "a/3", "b", "c/1", "c/2", "d"} {
		mustPut(t, s, k, []byte(k))
	}
	for _, v1 := range []bool{true, false} {
		var got []string
		opts := store.ListOptions{Delimiter: "/", MaxKeys: 1, V1: v1}
		for range 20 {
			res, err := s.List(t.Context(), "bkt", opts)
			if err != nil {
				t.Fatal(err)
			}
			if n := len(res.Objects) + len(res.CommonPrefixes); n > 1 {
				t.Fatalf("page of %d entries with MaxKeys 1", n)
			}
			for _, o := range res.Objects {
				got = append(got, o.Key)
			}
			got = append(got, res.CommonPrefixes...)
			if !res.IsTruncated {
				break
			}
			opts.StartAfter, opts.ContinuationToken = res.NextMarker, res.NextContinuationToken
		}
		if want := "a/ b c/ d"; strings.Join(got, " ") != want {
			t.Errorf("V1=%v: listed %q, want %q", v1, got, want)
		}
	}
}

func TestInvalidBucketNames(t *testing.T) {
	s := New()
	for _, name := range []string{"ab", "Upper", "under_score", "-lead", "trail-", "a..b", "192.168.1.1", strings.Repeat("a", 64)} {
		err := s.CreateBucket(t.Context(), name, "")
		var apiErr *store.APIError
		if !errors.As(err, &apiErr) || apiErr.Code != "InvalidBucketName" {
			t.Errorf("CreateBucket(%q) = %v, want InvalidBucketName", name, err)
		}
	}
	for _, name := range []string{"abc", "my.bucket-1", strings.Repeat("a", 63)} {
		if err := s.CreateBucket(t.Context(), name, ""); err != nil {
			t.Errorf("CreateBucket(%q) = %v", name, err)
		}
	}
}

func TestCopyOntoItselfNeedsReplace(t *testing.T) {
	s := newStoreWithBucket(t)
	ctx := t.Context()
	mustPut(t, s, "k", []byte("data"))
	src := store.CopySource{Bucket: "bkt", Key: "k"}
	_, err := s.Copy(ctx, src, "bkt", "k", store.CopyOptions{})
	var apiErr *store.APIError
	if !errors.As(err, &apiErr) || apiErr.Code != "InvalidRequest" {
		t.Errorf("Copy onto itself = %v, want InvalidRequest", err)
	}
	if _, err := s.Copy(ctx, src, "bkt", "k", store.CopyOptions{ReplaceMetadata: true, Metadata: store.PutOptions{ContentType: "a/b"}}); err != nil {
		t.Fatalf("Copy onto itself with REPLACE: %v", err)
	}
	if info, _ := s.Stat(ctx, "bkt", "k"); info.ContentType != "a/b" {
		t.Errorf("content type = %q after REPLACE", info.ContentType)
	}
}

func TestCanceledContext(t *testing.T) {
	s := newStoreWithBucket(t)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := s.Stat(ctx, "bkt", "k"); !errors.Is(err, context.Canceled) {
		t.Errorf("Stat with a done context = %v", err)
	}
}

// TestConcurrentUse runs writers, readers and listers at once; run it with
// -race.
func TestConcurrentUse(t *testing.T) {
	s := newStoreWithBucket(t)
	ctx := t.Context()
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := range 50 {
				key := fmt.Sprintf("k%d", i%5)
				data := []byte(fmt.Sprintf("writer %d round %d", w, i))
				if _, err := s.Put(ctx, "bkt", key, bytes.NewReader(data), int64(len(data)), store.PutOptions{}); err != nil {
					t.Error(err)
					return
				}
				body, info, _, err := s.Get(ctx, "bkt", key, store.GetOptions{})
				if err != nil {
					t.Error(err)
					return
				}
				got, err := io.ReadAll(body)
				body.Close()
				if err != nil || md5hex(got) != info.ETag || int64(len(got)) != info.Size {
					t.Errorf("Get(%s) = %q, etag %q size %d: body and info disagree", key, got, info.ETag, info.Size)
					return
				}
				if _, err := s.List(ctx, "bkt", store.ListOptions{MaxKeys: 2}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}
