//go:build integration && linux

package instance_test

// The cases of TestDifferentialSDK: aws-sdk-go-v2 calls, and presigned
// URLs from aws-sdk-go-v2 and minio-go.

import (
	"bytes"
	"crypto/md5"
	"encoding/base64"
	"fmt"
	"hash/crc32"
	"io"
	"net/http"
	"net/url"
	"slices"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	s3v2 "github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"
)

// --- cases ----------------------------------------------------------------

type goDiffCase struct {
	id string
	fn func(d *diffCtx)
}

var diffData = bytes.Repeat([]byte("0123456789abcdef"), 640) // 10 KiB

func (d *diffCtx) put(key string, body []byte, mut func(*s3v2.PutObjectInput)) {
	in := &s3v2.PutObjectInput{Bucket: &d.bucket, Key: aws.String(key), Body: bytes.NewReader(body)}
	if mut != nil {
		mut(in)
	}
	d.call("PutObject "+key, func() error { _, err := d.side.sdk.PutObject(d.ctx, in); return err })
}

func (d *diffCtx) get(key string, mut func(*s3v2.GetObjectInput)) {
	in := &s3v2.GetObjectInput{Bucket: &d.bucket, Key: aws.String(key)}
	if mut != nil {
		mut(in)
	}
	d.call("GetObject "+key, func() error {
		out, err := d.side.sdk.GetObject(d.ctx, in)
		if err == nil {
			_, err = io.Copy(io.Discard, out.Body)
			out.Body.Close()
		}
		return err
	})
}

func (d *diffCtx) head(key string, mut func(*s3v2.HeadObjectInput)) {
	in := &s3v2.HeadObjectInput{Bucket: &d.bucket, Key: aws.String(key)}
	if mut != nil {
		mut(in)
	}
	d.call("HeadObject "+key, func() error { _, err := d.side.sdk.HeadObject(d.ctx, in); return err })
}

func (d *diffCtx) etag(key string) string {
	out, err := d.side.sdk.HeadObject(d.ctx, &s3v2.HeadObjectInput{Bucket: &d.bucket, Key: aws.String(key)})
	if err != nil {
		return `"none"`
	}
	return aws.ToString(out.ETag)
}

func b64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

func crc32b64(b []byte) string {
	s := crc32.ChecksumIEEE(b)
	return b64([]byte{byte(s >> 24), byte(s >> 16), byte(s >> 8), byte(s)})
}

var (
	diffPast   = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	diffFuture = time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)
	diffPart   = bytes.Repeat([]byte("p"), 5<<20)
)

// mpu creates an upload of key and uploads parts; it returns the upload id
// and the parts as completed.
func (d *diffCtx) mpu(key string, parts [][]byte, create func(*s3v2.CreateMultipartUploadInput), part func(*s3v2.UploadPartInput)) (string, []s3types.CompletedPart) {
	in := &s3v2.CreateMultipartUploadInput{Bucket: &d.bucket, Key: aws.String(key)}
	if create != nil {
		create(in)
	}
	var id string
	d.call("CreateMultipartUpload", func() error {
		out, err := d.side.sdk.CreateMultipartUpload(d.ctx, in)
		if err == nil {
			id = aws.ToString(out.UploadId)
		}
		return err
	})
	var done []s3types.CompletedPart
	for i, body := range parts {
		n := int32(i + 1)
		pin := &s3v2.UploadPartInput{Bucket: &d.bucket, Key: aws.String(key), UploadId: &id, PartNumber: &n, Body: bytes.NewReader(body)}
		if part != nil {
			part(pin)
		}
		d.call(fmt.Sprintf("UploadPart %d", n), func() error {
			out, err := d.side.sdk.UploadPart(d.ctx, pin)
			if err == nil {
				done = append(done, s3types.CompletedPart{PartNumber: &n, ETag: out.ETag, ChecksumCRC32: out.ChecksumCRC32})
			}
			return err
		})
	}
	return id, done
}

func (d *diffCtx) complete(key, id string, parts []s3types.CompletedPart, mut func(*s3v2.CompleteMultipartUploadInput)) {
	in := &s3v2.CompleteMultipartUploadInput{Bucket: &d.bucket, Key: aws.String(key), UploadId: &id,
		MultipartUpload: &s3types.CompletedMultipartUpload{Parts: parts}}
	if mut != nil {
		mut(in)
	}
	d.call("CompleteMultipartUpload", func() error { _, err := d.side.sdk.CompleteMultipartUpload(d.ctx, in); return err })
}

// presigned sends a request presigned by aws-sdk-go-v2, with the headers
// it signed.
func (d *diffCtx) presigned(op, u, method string, signed http.Header, body []byte) {
	d.url(op, method, u, body, signed)
}

var goDiffCases = []goDiffCase{
	{"object.put_get", func(d *diffCtx) {
		d.put("k", diffData, func(in *s3v2.PutObjectInput) { in.ContentType = aws.String("text/plain") })
		d.get("k", nil)
		d.head("k", nil)
	}},
	{"object.put_metadata", func(d *diffCtx) {
		d.put("k", diffData, func(in *s3v2.PutObjectInput) {
			in.Metadata = map[string]string{"alpha": "1", "beta": "two words"}
			in.ContentEncoding, in.ContentDisposition = aws.String("identity"), aws.String("inline")
			in.ContentLanguage, in.CacheControl = aws.String("en"), aws.String("max-age=60")
		})
		d.head("k", nil)
		d.get("k", nil)
	}},
	{"object.empty", func(d *diffCtx) {
		d.put("k", nil, nil)
		d.get("k", nil)
		d.head("k", nil)
	}},
	{"object.missing", func(d *diffCtx) {
		d.get("missing", nil)
		d.head("missing", nil)
		d.call("DeleteObject missing", func() error {
			_, err := d.side.sdk.DeleteObject(d.ctx, &s3v2.DeleteObjectInput{Bucket: &d.bucket, Key: aws.String("missing")})
			return err
		})
	}},
	{"object.missing_bucket", func(d *diffCtx) {
		d.bucket += "-none"
		d.get("k", nil)
		d.head("k", nil)
		d.put("k", []byte("x"), nil)
	}},
	{"object.delete", func(d *diffCtx) {
		d.put("k", diffData, nil)
		d.get("k", nil)
		d.call("DeleteObject", func() error {
			_, err := d.side.sdk.DeleteObject(d.ctx, &s3v2.DeleteObjectInput{Bucket: &d.bucket, Key: aws.String("k")})
			return err
		})
		d.get("k", nil)
	}},
	{"object.overwrite", func(d *diffCtx) {
		d.put("k", []byte("first"), nil)
		d.get("k", nil)
		d.put("k", []byte("second, longer"), nil)
		d.get("k", nil)
	}},
	{"range.first_bytes", func(d *diffCtx) {
		d.put("k", diffData, nil)
		d.get("k", func(in *s3v2.GetObjectInput) { in.Range = aws.String("bytes=0-9") })
	}},
	{"range.suffix", func(d *diffCtx) {
		d.put("k", diffData, nil)
		d.get("k", func(in *s3v2.GetObjectInput) { in.Range = aws.String("bytes=-5") })
	}},
	{"range.open", func(d *diffCtx) {
		d.put("k", diffData, nil)
		d.get("k", func(in *s3v2.GetObjectInput) { in.Range = aws.String("bytes=10000-") })
		d.head("k", func(in *s3v2.HeadObjectInput) { in.Range = aws.String("bytes=0-9") })
	}},
	{"range.unsatisfiable", func(d *diffCtx) {
		d.put("k", diffData, nil)
		d.get("k", func(in *s3v2.GetObjectInput) { in.Range = aws.String("bytes=20000-30000") })
	}},
	{"conditional.get", func(d *diffCtx) {
		d.put("k", diffData, nil)
		etag := d.etag("k")
		d.get("k", func(in *s3v2.GetObjectInput) { in.IfMatch = aws.String(etag) })
		d.get("k", func(in *s3v2.GetObjectInput) { in.IfMatch = aws.String(`"0123"`) })
		d.get("k", func(in *s3v2.GetObjectInput) { in.IfNoneMatch = aws.String(etag) })
		d.get("k", func(in *s3v2.GetObjectInput) { in.IfModifiedSince = aws.Time(diffFuture) })
		d.get("k", func(in *s3v2.GetObjectInput) { in.IfUnmodifiedSince = aws.Time(diffPast) })
	}},
	{"conditional.head", func(d *diffCtx) {
		d.put("k", diffData, nil)
		etag := d.etag("k")
		d.head("k", func(in *s3v2.HeadObjectInput) { in.IfMatch = aws.String(`"0123"`) })
		d.head("k", func(in *s3v2.HeadObjectInput) { in.IfNoneMatch = aws.String(etag) })
	}},
	{"conditional.put", func(d *diffCtx) {
		d.put("k", diffData, nil)
		etag := d.etag("k")
		d.put("k", []byte("refused"), func(in *s3v2.PutObjectInput) { in.IfNoneMatch = aws.String("*") })
		d.put("k", []byte("refused"), func(in *s3v2.PutObjectInput) { in.IfMatch = aws.String(`"0123"`) })
		d.put("k", []byte("accepted"), func(in *s3v2.PutObjectInput) { in.IfMatch = aws.String(etag) })
		d.get("k", nil)
	}},
	{"overrides.get", func(d *diffCtx) {
		d.put("k", diffData, nil)
		d.get("k", func(in *s3v2.GetObjectInput) {
			in.ResponseContentType, in.ResponseContentDisposition = aws.String("application/json"), aws.String("inline")
			in.ResponseCacheControl, in.ResponseContentLanguage = aws.String("no-cache"), aws.String("fr")
		})
	}},
}

func init() {
	for _, a := range []struct {
		name string
		alg  s3types.ChecksumAlgorithm
	}{
		{"crc32", s3types.ChecksumAlgorithmCrc32}, {"crc32c", s3types.ChecksumAlgorithmCrc32c},
		{"crc64nvme", s3types.ChecksumAlgorithmCrc64nvme}, {"sha256", s3types.ChecksumAlgorithmSha256},
		{"sha1", s3types.ChecksumAlgorithmSha1},
	} {
		goDiffCases = append(goDiffCases, goDiffCase{"checksum." + a.name, func(d *diffCtx) {
			d.put("k", diffData, func(in *s3v2.PutObjectInput) { in.ChecksumAlgorithm = a.alg })
			d.head("k", func(in *s3v2.HeadObjectInput) { in.ChecksumMode = s3types.ChecksumModeEnabled })
			d.get("k", func(in *s3v2.GetObjectInput) { in.ChecksumMode = s3types.ChecksumModeEnabled })
		}})
	}
	goDiffCases = append(goDiffCases, moreDiffCases...)
}

var moreDiffCases = []goDiffCase{
	{"checksum.wrong", func(d *diffCtx) {
		d.put("k", diffData, func(in *s3v2.PutObjectInput) { in.ChecksumCRC32 = aws.String(crc32b64([]byte("other"))) })
		d.head("k", nil)
	}},
	{"checksum.content_md5_wrong", func(d *diffCtx) {
		sum := md5.Sum([]byte("other"))
		d.put("k", diffData, func(in *s3v2.PutObjectInput) { in.ContentMD5 = aws.String(b64(sum[:])) })
	}},
	{"copy.basic", func(d *diffCtx) {
		d.put("src", diffData, func(in *s3v2.PutObjectInput) { in.Metadata = map[string]string{"m": "1"} })
		d.call("CopyObject", func() error {
			_, err := d.side.sdk.CopyObject(d.ctx, &s3v2.CopyObjectInput{Bucket: &d.bucket, Key: aws.String("dst"),
				CopySource: aws.String(d.bucket + "/src")})
			return err
		})
		d.head("dst", nil)
	}},
	{"copy.replace", func(d *diffCtx) {
		d.put("src", diffData, nil)
		d.call("CopyObject", func() error {
			_, err := d.side.sdk.CopyObject(d.ctx, &s3v2.CopyObjectInput{Bucket: &d.bucket, Key: aws.String("dst"),
				CopySource: aws.String(d.bucket + "/src"), MetadataDirective: s3types.MetadataDirectiveReplace,
				Metadata: map[string]string{"n": "2"}, ContentType: aws.String("text/x-dst")})
			return err
		})
		d.head("dst", nil)
	}},
	{"copy.missing_source", func(d *diffCtx) {
		d.call("CopyObject", func() error {
			_, err := d.side.sdk.CopyObject(d.ctx, &s3v2.CopyObjectInput{Bucket: &d.bucket, Key: aws.String("dst"),
				CopySource: aws.String(d.bucket + "/nope")})
			return err
		})
	}},
	{"delete_objects", func(d *diffCtx) {
		d.put("a", []byte("x"), nil)
		d.put("b", []byte("x"), nil)
		d.call("DeleteObjects", func() error {
			_, err := d.side.sdk.DeleteObjects(d.ctx, &s3v2.DeleteObjectsInput{Bucket: &d.bucket, Delete: &s3types.Delete{
				Objects: []s3types.ObjectIdentifier{{Key: aws.String("a")}, {Key: aws.String("b")}, {Key: aws.String("missing")}}}})
			return err
		})
		d.get("a", nil)
	}},
	{"list.v2", func(d *diffCtx) {
		for _, k := range []string{"a", "b/1", "b/2", "b/c/3", "z"} {
			d.put(k, []byte("x"), nil)
		}
		d.call("ListObjectsV2", func() error {
			_, err := d.side.sdk.ListObjectsV2(d.ctx, &s3v2.ListObjectsV2Input{Bucket: &d.bucket, Prefix: aws.String("b/"), Delimiter: aws.String("/")})
			return err
		})
		var token *string
		for range 4 {
			d.call("ListObjectsV2 page", func() error {
				out, err := d.side.sdk.ListObjectsV2(d.ctx, &s3v2.ListObjectsV2Input{Bucket: &d.bucket, MaxKeys: aws.Int32(2), ContinuationToken: token})
				if err == nil {
					token = out.NextContinuationToken
				}
				return err
			})
			if token == nil {
				break
			}
		}
	}},
	{"list.v1", func(d *diffCtx) {
		for _, k := range []string{"a", "b/1", "z"} {
			d.put(k, []byte("x"), nil)
		}
		d.call("ListObjects", func() error {
			_, err := d.side.sdk.ListObjects(d.ctx, &s3v2.ListObjectsInput{Bucket: &d.bucket, Marker: aws.String("a")})
			return err
		})
	}},
	{"mpu.basic", func(d *diffCtx) {
		id, parts := d.mpu("mp", [][]byte{diffPart, []byte("tail")}, nil, nil)
		d.call("ListParts", func() error {
			_, err := d.side.sdk.ListParts(d.ctx, &s3v2.ListPartsInput{Bucket: &d.bucket, Key: aws.String("mp"), UploadId: &id})
			return err
		})
		d.complete("mp", id, parts, nil)
		d.head("mp", nil)
	}},
	{"mpu.too_small", func(d *diffCtx) {
		id, parts := d.mpu("mp", [][]byte{[]byte("a"), []byte("b")}, nil, nil)
		d.complete("mp", id, parts, nil)
	}},
	{"mpu.wrong_etag", func(d *diffCtx) {
		id, parts := d.mpu("mp", [][]byte{[]byte("only")}, nil, nil)
		if len(parts) == 1 {
			parts[0].ETag = aws.String(`"00000000000000000000000000000000"`)
		}
		d.complete("mp", id, parts, nil)
	}},
	{"mpu.abort", func(d *diffCtx) {
		id, _ := d.mpu("mp", [][]byte{[]byte("x")}, nil, nil)
		d.call("AbortMultipartUpload", func() error {
			_, err := d.side.sdk.AbortMultipartUpload(d.ctx, &s3v2.AbortMultipartUploadInput{Bucket: &d.bucket, Key: aws.String("mp"), UploadId: &id})
			return err
		})
		d.call("ListParts", func() error {
			_, err := d.side.sdk.ListParts(d.ctx, &s3v2.ListPartsInput{Bucket: &d.bucket, Key: aws.String("mp"), UploadId: &id})
			return err
		})
	}},
	{"mpu.checksum_crc32", func(d *diffCtx) {
		id, parts := d.mpu("mp", [][]byte{diffPart, []byte("tail")},
			func(in *s3v2.CreateMultipartUploadInput) { in.ChecksumAlgorithm = s3types.ChecksumAlgorithmCrc32 },
			func(in *s3v2.UploadPartInput) { in.ChecksumAlgorithm = s3types.ChecksumAlgorithmCrc32 })
		d.complete("mp", id, parts, nil)
		d.head("mp", func(in *s3v2.HeadObjectInput) { in.ChecksumMode = s3types.ChecksumModeEnabled })
	}},
	{"mpu.checksum_full_object", func(d *diffCtx) {
		id, parts := d.mpu("mp", [][]byte{diffPart, []byte("tail")},
			func(in *s3v2.CreateMultipartUploadInput) {
				in.ChecksumAlgorithm, in.ChecksumType = s3types.ChecksumAlgorithmCrc32, s3types.ChecksumTypeFullObject
			},
			func(in *s3v2.UploadPartInput) { in.ChecksumAlgorithm = s3types.ChecksumAlgorithmCrc32 })
		whole := append(slices.Clone(diffPart), []byte("tail")...)
		d.complete("mp", id, parts, func(in *s3v2.CompleteMultipartUploadInput) {
			in.ChecksumCRC32, in.ChecksumType = aws.String(crc32b64(whole)), s3types.ChecksumTypeFullObject
		})
		d.head("mp", func(in *s3v2.HeadObjectInput) { in.ChecksumMode = s3types.ChecksumModeEnabled })
	}},
	{"mpu.no_such_upload", func(d *diffCtx) {
		d.call("ListParts", func() error {
			_, err := d.side.sdk.ListParts(d.ctx, &s3v2.ListPartsInput{Bucket: &d.bucket, Key: aws.String("mp"), UploadId: aws.String("bm9uZQ")})
			return err
		})
	}},
	{"bucket.create_existing", func(d *diffCtx) {
		d.call("CreateBucket", func() error {
			_, err := d.side.sdk.CreateBucket(d.ctx, &s3v2.CreateBucketInput{Bucket: &d.bucket})
			return err
		})
	}},
	{"bucket.head_and_location", func(d *diffCtx) {
		d.call("HeadBucket", func() error {
			_, err := d.side.sdk.HeadBucket(d.ctx, &s3v2.HeadBucketInput{Bucket: &d.bucket})
			return err
		})
		d.call("HeadBucket missing", func() error {
			_, err := d.side.sdk.HeadBucket(d.ctx, &s3v2.HeadBucketInput{Bucket: aws.String(d.bucket + "-none")})
			return err
		})
		d.call("GetBucketLocation", func() error {
			_, err := d.side.sdk.GetBucketLocation(d.ctx, &s3v2.GetBucketLocationInput{Bucket: &d.bucket})
			return err
		})
	}},
	{"bucket.versioning", func(d *diffCtx) {
		d.call("GetBucketVersioning", func() error {
			_, err := d.side.sdk.GetBucketVersioning(d.ctx, &s3v2.GetBucketVersioningInput{Bucket: &d.bucket})
			return err
		})
	}},
	{"object.tagging", func(d *diffCtx) {
		d.put("k", diffData, func(in *s3v2.PutObjectInput) { in.Tagging = aws.String("a=1") })
		d.call("GetObjectTagging", func() error {
			_, err := d.side.sdk.GetObjectTagging(d.ctx, &s3v2.GetObjectTaggingInput{Bucket: &d.bucket, Key: aws.String("k")})
			return err
		})
	}},
	{"list.object_versions", func(d *diffCtx) {
		d.put("k", diffData, nil)
		d.call("ListObjectVersions", func() error {
			_, err := d.side.sdk.ListObjectVersions(d.ctx, &s3v2.ListObjectVersionsInput{Bucket: &d.bucket})
			return err
		})
	}},
	{"presign.get_checksum_mode", func(d *diffCtx) {
		d.put("k", diffData, func(in *s3v2.PutObjectInput) { in.ChecksumAlgorithm = s3types.ChecksumAlgorithmSha256 })
		req, err := d.side.presign.PresignGetObject(d.ctx, &s3v2.GetObjectInput{Bucket: &d.bucket, Key: aws.String("k"),
			ChecksumMode: s3types.ChecksumModeEnabled})
		if err != nil {
			d.t.Fatal(err)
		}
		d.presigned("presigned GET checksum mode", req.URL, req.Method, req.SignedHeader, nil)
	}},
	{"presign.get_head_overrides", func(d *diffCtx) {
		d.put("k", diffData, nil)
		req, err := d.side.presign.PresignGetObject(d.ctx, &s3v2.GetObjectInput{Bucket: &d.bucket, Key: aws.String("k"),
			ResponseContentType: aws.String("application/x-over")})
		if err != nil {
			d.t.Fatal(err)
		}
		d.presigned("presigned GET overrides", req.URL, req.Method, req.SignedHeader, nil)
		hreq, err := d.side.presign.PresignHeadObject(d.ctx, &s3v2.HeadObjectInput{Bucket: &d.bucket, Key: aws.String("k")})
		if err != nil {
			d.t.Fatal(err)
		}
		d.presigned("presigned HEAD", hreq.URL, hreq.Method, hreq.SignedHeader, nil)
		mreq, err := d.side.presign.PresignGetObject(d.ctx, &s3v2.GetObjectInput{Bucket: &d.bucket, Key: aws.String("missing")})
		if err != nil {
			d.t.Fatal(err)
		}
		d.presigned("presigned GET missing", mreq.URL, mreq.Method, mreq.SignedHeader, nil)
	}},
	{"presign.put", func(d *diffCtx) {
		body := []byte("presigned upload")
		req, err := d.side.presign.PresignPutObject(d.ctx, &s3v2.PutObjectInput{Bucket: &d.bucket, Key: aws.String("up"),
			ContentType: aws.String("text/x-up")})
		if err != nil {
			d.t.Fatal(err)
		}
		d.presigned("presigned PUT", req.URL, req.Method, req.SignedHeader, body)
		d.get("up", nil)
	}},
	{"presign.minio_go", func(d *diffCtx) {
		d.put("k", diffData, nil)
		u, err := d.side.mc.PresignedGetObject(d.ctx, d.bucket, "k", 10*time.Minute, url.Values{"response-content-type": {"text/x-mc"}})
		if err != nil {
			d.t.Fatal(err)
		}
		d.url("minio-go presigned GET", http.MethodGet, u.String(), nil, nil)
		pu, err := d.side.mc.PresignedPutObject(d.ctx, d.bucket, "up", 10*time.Minute)
		if err != nil {
			d.t.Fatal(err)
		}
		d.url("minio-go presigned PUT", http.MethodPut, pu.String(), []byte("minio-go upload"), nil)
		d.get("up", nil)
	}},
	{"object.part_number", func(d *diffCtx) {
		d.put("k", diffData, nil)
		d.get("k", func(in *s3v2.GetObjectInput) { in.PartNumber = aws.Int32(1) })
	}},
}
