package storetest

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"slices"
	"strings"
	"testing"

	"github.com/hoard-io/hoard/internal/store"
)

// listAll pages through a listing with opts (MaxKeys sets the page size)
// and returns every key and common prefix in order, and the page count.
func listAll(t *testing.T, st store.Store, bucket string, opts store.ListOptions) (keys, prefixes []string, pages int) {
	t.Helper()
	for {
		res, err := st.List(ctxFor(t), bucket, opts)
		if err != nil {
			t.Fatalf("List(%+v): %v", opts, err)
		}
		pages++
		for _, o := range res.Objects {
			if o.Bucket != bucket || o.ETag == "" || strings.Contains(o.ETag, `"`) || o.LastModified.IsZero() {
				t.Errorf("List entry %+v: want bucket, bare ETag and LastModified set", o)
			}
			keys = append(keys, o.Key)
		}
		prefixes = append(prefixes, res.CommonPrefixes...)
		if !res.IsTruncated {
			return keys, prefixes, pages
		}
		if pages > 100 {
			t.Fatalf("List(%+v): more than 100 pages", opts)
		}
		if opts.V1 {
			if res.NextMarker == "" {
				t.Fatalf("List V1: truncated page without NextMarker")
			}
			opts.StartAfter = res.NextMarker
		} else {
			if res.NextContinuationToken == "" {
				t.Fatalf("List V2: truncated page without NextContinuationToken")
			}
			opts.ContinuationToken = res.NextContinuationToken
		}
	}
}

func testListPagination(t *testing.T, st store.Store, _ Capabilities) {
	bucket := newBucket(t, st)
	all := []string{"a/1", "a/2", "a/b/3", "a/b/4", "b/1", "c", "d", "e/f/g"}
	for _, k := range all {
		put(t, st, bucket, k, []byte(k), store.PutOptions{})
	}
	for _, tc := range []struct {
		name         string
		opts         store.ListOptions
		keys, prefix []string
	}{
		{"flat", store.ListOptions{MaxKeys: 3}, all, nil},
		{"delimiter", store.ListOptions{MaxKeys: 2, Delimiter: "/"}, []string{"c", "d"}, []string{"a/", "b/", "e/"}},
		{"prefix", store.ListOptions{MaxKeys: 1, Prefix: "a/"}, []string{"a/1", "a/2", "a/b/3", "a/b/4"}, nil},
		{"prefix and delimiter", store.ListOptions{MaxKeys: 1, Prefix: "a/", Delimiter: "/"}, []string{"a/1", "a/2"}, []string{"a/b/"}},
		{"start after", store.ListOptions{MaxKeys: 2, StartAfter: "b/1"}, []string{"c", "d", "e/f/g"}, nil},
		{"no match", store.ListOptions{Prefix: "zzz"}, nil, nil},
	} {
		for _, v1 := range []bool{false, true} {
			name := tc.name + map[bool]string{false: " V2", true: " V1"}[v1]
			t.Run(name, func(t *testing.T) {
				opts := tc.opts
				opts.V1 = v1
				keys, prefixes, pages := listAll(t, st, bucket, opts)
				if !slices.Equal(keys, tc.keys) {
					t.Errorf("keys = %q, want %q", keys, tc.keys)
				}
				if !slices.Equal(prefixes, tc.prefix) {
					t.Errorf("common prefixes = %q, want %q", prefixes, tc.prefix)
				}
				if n := len(tc.keys) + len(tc.prefix); opts.MaxKeys > 0 && n > opts.MaxKeys && pages < 2 {
					t.Errorf("%d entries with MaxKeys %d came in %d page(s)", n, opts.MaxKeys, pages)
				}
			})
		}
	}
}

func testOddKeys(t *testing.T, st store.Store, _ Capabilities) {
	bucket := newBucket(t, st)
	keys := []string{
		"with space",
		"plus+sign",
		"percent%20literal",
		"100%",
		"unicode/ключ/日本語.txt",
		"query?and#hash&amp=1",
		"tilde~star*paren(1)",
		"dir/with space/+x",
	}
	slices.Sort(keys)
	for _, k := range keys {
		put(t, st, bucket, k, []byte(k), store.PutOptions{})
	}
	for _, k := range keys {
		got, info, _ := get(t, st, bucket, k, store.GetOptions{})
		if string(got) != k || info.Key != k {
			t.Errorf("Get(%q) = %q (info key %q)", k, got, info.Key)
		}
	}
	for _, v1 := range []bool{false, true} {
		got, _, _ := listAll(t, st, bucket, store.ListOptions{V1: v1, MaxKeys: 3, EncodingTypeURL: true})
		if !slices.Equal(got, keys) {
			t.Errorf("List(V1=%v) = %q, want %q", v1, got, keys)
		}
	}
	got, _, _ := listAll(t, st, bucket, store.ListOptions{Prefix: "dir/with space/"})
	if !slices.Equal(got, []string{"dir/with space/+x"}) {
		t.Errorf("List(prefix with space) = %q", got)
	}
}

func testDeleteMany(t *testing.T, st store.Store, _ Capabilities) {
	bucket := newBucket(t, st)
	keys := []string{"x/1", "x/2", "y z", "ключ"}
	for _, k := range keys {
		put(t, st, bucket, k, []byte("v"), store.PutOptions{})
	}
	put(t, st, bucket, "keep", []byte("v"), store.PutOptions{})
	failed, err := st.DeleteMany(ctxFor(t), bucket, append(keys, "never-existed"))
	if err != nil || len(failed) != 0 {
		t.Fatalf("DeleteMany = %v, %v; want no failures", failed, err)
	}
	left, _, _ := listAll(t, st, bucket, store.ListOptions{})
	if !slices.Equal(left, []string{"keep"}) {
		t.Errorf("after DeleteMany: %q, want [keep]", left)
	}
	if err := st.Delete(ctxFor(t), bucket, "keep"); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	_, err = st.Stat(ctxFor(t), bucket, "keep")
	wantErr(t, "Stat after Delete", err, store.ErrNoSuchKey)

	_, err = st.DeleteMany(ctxFor(t), bucket+"-missing", []string{"a"})
	wantErr(t, "DeleteMany(missing bucket)", err, store.ErrNoSuchBucket)
}

func testCopy(t *testing.T, st store.Store, _ Capabilities) {
	bucket := newBucket(t, st)
	data := randomBytes(1000)
	src := store.PutOptions{ContentType: "application/x-src", UserMetadata: map[string]string{"origin": "src"}}
	pr := put(t, st, bucket, "src", data, src)

	// COPY keeps the source's metadata.
	cr, err := st.Copy(ctxFor(t), store.CopySource{Bucket: bucket, Key: "src", IfMatch: pr.ETag}, bucket, "dst copy", store.CopyOptions{})
	if err != nil {
		t.Fatalf("Copy(COPY): %v", err)
	}
	if cr.ETag == "" || strings.Contains(cr.ETag, `"`) || cr.LastModified.IsZero() {
		t.Errorf("Copy result %+v: want bare ETag and LastModified", cr)
	}
	got, info, _ := get(t, st, bucket, "dst copy", store.GetOptions{})
	if !bytes.Equal(got, data) || info.ETag != cr.ETag {
		t.Errorf("copied object: %d bytes etag %q, want %d bytes etag %q", len(got), info.ETag, len(data), cr.ETag)
	}
	checkMetadata(t, "Copy(COPY)", info, src)

	// REPLACE takes the new metadata.
	repl := store.PutOptions{ContentType: "text/x-replaced", CacheControl: "no-cache", UserMetadata: map[string]string{"new": "yes"}}
	if _, err := st.Copy(ctxFor(t), store.CopySource{Bucket: bucket, Key: "src"}, bucket, "dst-replace",
		store.CopyOptions{ReplaceMetadata: true, Metadata: repl}); err != nil {
		t.Fatalf("Copy(REPLACE): %v", err)
	}
	_, info, _ = get(t, st, bucket, "dst-replace", store.GetOptions{})
	checkMetadata(t, "Copy(REPLACE)", info, repl)

	// Source conditions.
	_, err = st.Copy(ctxFor(t), store.CopySource{Bucket: bucket, Key: "src", IfMatch: "0123456789abcdef0123456789abcdef"}, bucket, "no", store.CopyOptions{})
	wantErr(t, "Copy(IfMatch mismatch)", err, store.ErrPreconditionFailed)
	_, err = st.Copy(ctxFor(t), store.CopySource{Bucket: bucket, Key: "src", IfNoneMatch: pr.ETag}, bucket, "no", store.CopyOptions{})
	wantErr(t, "Copy(IfNoneMatch match)", err, store.ErrPreconditionFailed)
	_, err = st.Copy(ctxFor(t), store.CopySource{Bucket: bucket, Key: "absent"}, bucket, "no", store.CopyOptions{})
	wantErr(t, "Copy(missing source)", err, store.ErrNoSuchKey)
}

func testMultipart(t *testing.T, st store.Store, _ Capabilities) {
	bucket := newBucket(t, st)
	ctx := ctxFor(t)
	meta := store.PutOptions{ContentType: "application/x-mp", UserMetadata: map[string]string{"parts": "3"}}
	id, err := st.CreateMultipartUpload(ctx, bucket, "mp obj", meta)
	if err != nil || id == "" {
		t.Fatalf("CreateMultipartUpload = %q, %v", id, err)
	}
	chunks := [][]byte{randomBytes(5 << 20), randomBytes(5 << 20), randomBytes(1234)}
	var parts []store.Part
	for i, c := range chunks {
		p, err := st.UploadPart(ctx, bucket, "mp obj", id, i+1, bytes.NewReader(c), int64(len(c)), store.PutOptions{})
		if err != nil {
			t.Fatalf("UploadPart(%d): %v", i+1, err)
		}
		if p.PartNumber != i+1 || p.Size != int64(len(c)) || p.ETag == "" || strings.Contains(p.ETag, `"`) {
			t.Fatalf("UploadPart(%d) = %+v", i+1, p)
		}
		parts = append(parts, p)
	}

	// ListParts, two per page.
	var listed []store.Part
	marker := 0
	for range 10 {
		res, err := st.ListParts(ctx, bucket, "mp obj", id, marker, 2)
		if err != nil {
			t.Fatalf("ListParts(marker %d): %v", marker, err)
		}
		listed = append(listed, res.Parts...)
		if !res.IsTruncated {
			break
		}
		marker = res.NextPartNumberMarker
	}
	if len(listed) != len(parts) {
		t.Fatalf("ListParts: %d parts, want %d", len(listed), len(parts))
	}
	for i, p := range listed {
		if p.PartNumber != parts[i].PartNumber || p.ETag != parts[i].ETag || p.Size != parts[i].Size {
			t.Errorf("ListParts[%d] = %+v, want %+v", i, p, parts[i])
		}
	}

	res, err := st.CompleteMultipartUpload(ctx, bucket, "mp obj", id, parts, store.CompleteOptions{})
	if err != nil {
		t.Fatalf("CompleteMultipartUpload: %v", err)
	}
	got, info, _ := get(t, st, bucket, "mp obj", store.GetOptions{})
	if !bytes.Equal(got, bytes.Join(chunks, nil)) {
		t.Fatalf("multipart object: %d bytes differ from the parts", len(got))
	}
	if info.ETag != res.ETag || !strings.HasSuffix(info.ETag, "-3") {
		t.Errorf("ETag = %q (complete said %q), want a 3-part ETag", info.ETag, res.ETag)
	}
	checkMetadata(t, "multipart", info, meta)

	// Parts of a completed upload are gone.
	_, err = st.ListParts(ctx, bucket, "mp obj", id, 0, 0)
	wantErr(t, "ListParts(completed)", err, store.ErrNoSuchUpload)
}

func testMultipartAbort(t *testing.T, st store.Store, _ Capabilities) {
	bucket := newBucket(t, st)
	ctx := ctxFor(t)
	id, err := st.CreateMultipartUpload(ctx, bucket, "ab", store.PutOptions{})
	if err != nil {
		t.Fatalf("CreateMultipartUpload: %v", err)
	}
	part, err := st.UploadPart(ctx, bucket, "ab", id, 1, strings.NewReader("part"), 4, store.PutOptions{})
	if err != nil {
		t.Fatalf("UploadPart: %v", err)
	}
	if err := st.AbortMultipartUpload(ctx, bucket, "ab", id); err != nil {
		t.Fatalf("AbortMultipartUpload: %v", err)
	}
	_, err = st.UploadPart(ctx, bucket, "ab", id, 2, strings.NewReader("more"), 4, store.PutOptions{})
	wantErr(t, "UploadPart(aborted)", err, store.ErrNoSuchUpload)
	_, err = st.ListParts(ctx, bucket, "ab", id, 0, 0)
	wantErr(t, "ListParts(aborted)", err, store.ErrNoSuchUpload)
	_, err = st.CompleteMultipartUpload(ctx, bucket, "ab", id, []store.Part{part}, store.CompleteOptions{})
	wantErr(t, "Complete(aborted)", err, store.ErrNoSuchUpload)
	_, err = st.Stat(ctx, bucket, "ab")
	wantErr(t, "Stat(aborted)", err, store.ErrNoSuchKey)

	// Completing with a part that was never uploaded is the store's call
	// (InvalidPart), relayed as an APIError.
	id, err = st.CreateMultipartUpload(ctx, bucket, "bad", store.PutOptions{})
	if err != nil {
		t.Fatalf("CreateMultipartUpload: %v", err)
	}
	_, err = st.CompleteMultipartUpload(ctx, bucket, "bad", id, []store.Part{{PartNumber: 1, ETag: "0123456789abcdef0123456789abcdef"}}, store.CompleteOptions{})
	var apiErr *store.APIError
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 {
		t.Errorf("Complete(unknown part) = %v, want a 400 *store.APIError", err)
	}
	_ = st.AbortMultipartUpload(ctx, bucket, "bad", id)
}

func testBuckets(t *testing.T, st store.Store, _ Capabilities) {
	bucket := newBucket(t, st)
	ctx := ctxFor(t)
	wantErr(t, "CreateBucket(again)", st.CreateBucket(ctx, bucket, ""), store.ErrBucketExists)
	if err := st.HeadBucket(ctx, bucket); err != nil {
		t.Errorf("HeadBucket: %v", err)
	}
	bs, err := st.ListBuckets(ctx)
	if err != nil {
		t.Fatalf("ListBuckets: %v", err)
	}
	if !slices.ContainsFunc(bs, func(b store.BucketInfo) bool { return b.Name == bucket && !b.CreationDate.IsZero() }) {
		t.Errorf("ListBuckets = %+v: %s (with a creation date) missing", bs, bucket)
	}
	put(t, st, bucket, "k", []byte("v"), store.PutOptions{})
	wantErr(t, "DeleteBucket(non-empty)", st.DeleteBucket(ctx, bucket), store.ErrBucketNotEmpty)

	err = st.CreateBucket(ctx, "Invalid_Bucket_Name", "")
	var apiErr *store.APIError
	if !errors.As(err, &apiErr) || apiErr.Code != "InvalidBucketName" {
		t.Errorf("CreateBucket(invalid name) = %v, want APIError InvalidBucketName", err)
	}
}

// crc32Of is S3's base64 of the big-endian CRC32 (IEEE).
func crc32Of(b []byte) string {
	var sum [4]byte
	binary.BigEndian.PutUint32(sum[:], crc32.ChecksumIEEE(b))
	return base64.StdEncoding.EncodeToString(sum[:])
}

func testChecksums(t *testing.T, st store.Store, _ Capabilities) {
	bucket := newBucket(t, st)
	data := randomBytes(300 << 10)
	want := crc32Of(data)

	// A value the client sent is forwarded and recorded.
	put(t, st, bucket, "with-value", data, store.PutOptions{ChecksumAlgorithm: "CRC32", ChecksumValue: want})
	_, info, _ := get(t, st, bucket, "with-value", store.GetOptions{ChecksumMode: true})
	if info.Checksums["CRC32"] != want {
		t.Errorf("Get(ChecksumMode).Checksums = %v, want CRC32 %s", info.Checksums, want)
	}
	si, err := st.Stat(ctxFor(t), bucket, "with-value")
	if err != nil || si.Checksums["CRC32"] != want {
		t.Errorf("Stat.Checksums = %v (%v), want CRC32 %s", si.Checksums, err, want)
	}

	// A wrong value is rejected by the store, and nothing is written.
	bad := crc32Of([]byte("something else"))
	_, err = st.Put(ctxFor(t), bucket, "bad", bytes.NewReader(data), int64(len(data)),
		store.PutOptions{ChecksumAlgorithm: "CRC32", ChecksumValue: bad})
	var apiErr *store.APIError
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 {
		t.Errorf("Put(wrong CRC32) = %v, want a 400 *store.APIError", err)
	}
	_, err = st.Stat(ctxFor(t), bucket, "bad")
	wantErr(t, "Stat(rejected put)", err, store.ErrNoSuchKey)

	// Algorithm alone: the store computes and records it.
	put(t, st, bucket, "algo-only", data, store.PutOptions{ChecksumAlgorithm: "CRC32"})
	_, info, _ = get(t, st, bucket, "algo-only", store.GetOptions{ChecksumMode: true})
	if info.Checksums["CRC32"] != want {
		t.Errorf("algorithm-only Put: Checksums = %v, want CRC32 %s", info.Checksums, want)
	}

	// Content-MD5 is forwarded and checked.
	_, err = st.Put(ctxFor(t), bucket, "md5", strings.NewReader("abc"), 3,
		store.PutOptions{ContentMD5: base64.StdEncoding.EncodeToString(make([]byte, 16))})
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 {
		t.Errorf("Put(wrong Content-MD5) = %v, want a 400 *store.APIError", err)
	}
}

func testMultipartChecksums(t *testing.T, st store.Store, _ Capabilities) {
	bucket := newBucket(t, st)
	ctx := ctxFor(t)
	id, err := st.CreateMultipartUpload(ctx, bucket, "mpc", store.PutOptions{ChecksumAlgorithm: "CRC32"})
	if err != nil {
		t.Fatalf("CreateMultipartUpload(CRC32): %v", err)
	}
	defer func() { _ = st.AbortMultipartUpload(ctx, bucket, "mpc", id) }()
	chunks := [][]byte{randomBytes(5 << 20), randomBytes(777)}
	var parts []store.Part
	for i, c := range chunks {
		opts := store.PutOptions{ChecksumAlgorithm: "CRC32"}
		if i == 0 {
			opts.ChecksumValue = crc32Of(c) // the client sent it
		} // else: computed while streaming
		p, err := st.UploadPart(ctx, bucket, "mpc", id, i+1, bytes.NewReader(c), int64(len(c)), opts)
		if err != nil {
			t.Fatalf("UploadPart(%d): %v", i+1, err)
		}
		if p.Checksums["CRC32"] != crc32Of(c) {
			t.Errorf("UploadPart(%d).Checksums = %v, want CRC32 %s", i+1, p.Checksums, crc32Of(c))
		}
		parts = append(parts, p)
	}
	res, err := st.ListParts(ctx, bucket, "mpc", id, 0, 0)
	if err != nil {
		t.Fatalf("ListParts: %v", err)
	}
	if res.ChecksumAlgorithm != "CRC32" {
		t.Errorf("ListParts.ChecksumAlgorithm = %q, want CRC32", res.ChecksumAlgorithm)
	}
	for i, p := range res.Parts {
		if p.Checksums["CRC32"] != parts[i].Checksums["CRC32"] {
			t.Errorf("ListParts[%d].Checksums = %v, want %v", i, p.Checksums, parts[i].Checksums)
		}
	}
	// A wrong part checksum is rejected.
	_, err = st.UploadPart(ctx, bucket, "mpc", id, 3, strings.NewReader("xyz"), 3,
		store.PutOptions{ChecksumAlgorithm: "CRC32", ChecksumValue: crc32Of([]byte("abc"))})
	var apiErr *store.APIError
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 {
		t.Errorf("UploadPart(wrong CRC32) = %v, want a 400 *store.APIError", err)
	}
	if _, err := st.CompleteMultipartUpload(ctx, bucket, "mpc", id, parts, store.CompleteOptions{}); err != nil {
		t.Fatalf("CompleteMultipartUpload: %v", err)
	}
	got, _, _ := get(t, st, bucket, "mpc", store.GetOptions{})
	if !bytes.Equal(got, bytes.Join(chunks, nil)) {
		t.Errorf("object differs from its parts")
	}
}
