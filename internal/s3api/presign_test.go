package s3api

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"hash/crc32"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
)

// TestSDKPresignedURLs runs URLs presigned by aws-sdk-go-v2 against the
// front: the SDK signs bookkeeping parameters (x-id, X-Amz-Checksum-Mode,
// x-amz-sdk-checksum-algorithm, ...) into the query, which must not be taken
// for unsupported sub-resources.
func TestSDKPresignedURLs(t *testing.T) {
	s := newTestServer(t)
	ctx := context.Background()
	client := s3.New(s3.Options{
		Region: testRegion, BaseEndpoint: aws.String(s.URL), UsePathStyle: true,
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: testAK, SecretAccessKey: testSK}, nil
		}),
	})
	pc := s3.NewPresignClient(client)
	send := func(t *testing.T, method, url string, signed http.Header, body []byte) *http.Response {
		t.Helper()
		req, err := http.NewRequest(method, url, bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		for k, vs := range signed {
			if !strings.EqualFold(k, "host") {
				req.Header[k] = vs
			}
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}

	put, err := pc.PresignPutObject(ctx, &s3.PutObjectInput{
		Bucket: aws.String("bkt"), Key: aws.String("p"), ChecksumAlgorithm: types.ChecksumAlgorithmCrc32,
		ChecksumCRC32: aws.String(base64.StdEncoding.EncodeToString(binary.BigEndian.AppendUint32(nil, crc32.ChecksumIEEE([]byte("presigned"))))),
	}, s3.WithPresignExpires(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if resp := send(t, put.Method, put.URL, put.SignedHeader, []byte("presigned")); resp.StatusCode != 200 {
		data, _ := io.ReadAll(resp.Body)
		t.Fatalf("presigned PUT %s: %d %s", put.URL, resp.StatusCode, data)
	}

	get, err := pc.PresignGetObject(ctx, &s3.GetObjectInput{
		Bucket: aws.String("bkt"), Key: aws.String("p"), ChecksumMode: types.ChecksumModeEnabled,
	}, s3.WithPresignExpires(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.ToLower(get.URL), "x-amz-checksum-mode") {
		t.Fatalf("the SDK no longer signs the checksum mode into %s", get.URL)
	}
	resp := send(t, get.Method, get.URL, get.SignedHeader, nil)
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || string(data) != "presigned" {
		t.Fatalf("presigned GET %s: %d %s", get.URL, resp.StatusCode, data)
	}
	// The checksum mode in the query asks for the checksums as the header would.
	if got, want := resp.Header.Get("x-amz-checksum-crc32"), put.SignedHeader.Get("x-amz-checksum-crc32"); got == "" || got != want {
		t.Fatalf("presigned GET with checksum mode: crc32 %q, want %q", got, want)
	}

	head, err := pc.PresignHeadObject(ctx, &s3.HeadObjectInput{
		Bucket: aws.String("bkt"), Key: aws.String("p"), ChecksumMode: types.ChecksumModeEnabled,
	}, s3.WithPresignExpires(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if resp := send(t, head.Method, head.URL, head.SignedHeader, nil); resp.StatusCode != 200 {
		t.Fatalf("presigned HEAD %s: %d", head.URL, resp.StatusCode)
	}
}
