package s3auth

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/hoard-io/hoard/internal/clock"
)

// verifyingTransport stands in for hoard's HTTP layer: every request the
// real S3 client sends goes through Verify and its body is drained, and the
// outcome is recorded for the test.
type verifyingTransport struct {
	t *testing.T
	v *Verifier

	mu      sync.Mutex
	results []sdkResult
}

type sdkResult struct {
	method  Method
	payload []byte
	err     error
	algo    string
	header  http.Header
}

func (tr *verifyingTransport) Do(req *http.Request) (*http.Response, error) {
	r := serverSide(tr.t, req)
	res := sdkResult{header: r.Header.Clone()}
	vr, err := tr.v.Verify(r)
	if err == nil {
		res.method = vr.Method
		res.payload, err = io.ReadAll(vr.Body)
		a, _ := vr.TrailerChecksum()
		res.algo = string(a)
		if res.algo == "" {
			res.algo = string(vr.ChecksumAlgorithm)
		}
		vr.Body.Close()
	}
	res.err = err
	tr.mu.Lock()
	tr.results = append(tr.results, res)
	tr.mu.Unlock()

	status, body := http.StatusOK, ""
	if err != nil {
		status, body = http.StatusForbidden, "<Error><Code>AccessDenied</Code></Error>"
	} else if req.Method == http.MethodGet && req.URL.Query().Has("list-type") {
		body = "<ListBucketResult></ListBucketResult>"
	}
	return &http.Response{
		StatusCode: status,
		Header:     http.Header{"Etag": {`"0"`}, "Content-Type": {"application/xml"}},
		Body:       io.NopCloser(strings.NewReader(body)),
		Request:    req,
	}, nil
}

func (tr *verifyingTransport) last(t *testing.T) sdkResult {
	t.Helper()
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if len(tr.results) == 0 {
		t.Fatal("no request reached the transport")
	}
	return tr.results[len(tr.results)-1]
}

// TestAWSSDKClient drives the real aws-sdk-go-v2 S3 client, so the
// verifier sees exactly what it sends: flexible-checksum trailers, hex
// payload hashes, encoded keys and presigned URLs.
func TestAWSSDKClient(t *testing.T) {
	tr := &verifyingTransport{t: t, v: newTestVerifier(t, clock.Real())}
	client := s3.New(s3.Options{
		Region:       testRegion,
		BaseEndpoint: aws.String("https://" + testHost),
		UsePathStyle: true,
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: testAK, SecretAccessKey: testSK}, nil
		}),
		HTTPClient:       tr,
		RetryMaxAttempts: 1,
	})
	ctx := context.Background()
	payload := bytes.Repeat([]byte("sdk-payload "), 20000) // ~240 KiB, several chunks

	for _, key := range awkwardKeys {
		t.Run("put seekable/"+key, func(t *testing.T) {
			_, err := client.PutObject(ctx, &s3.PutObjectInput{
				Bucket: aws.String("bucket"), Key: aws.String(key), Body: bytes.NewReader(payload),
			})
			res := tr.last(t)
			if err != nil || res.err != nil {
				t.Fatalf("sdk err %v, verify err %v", err, res.err)
			}
			if !bytes.Equal(res.payload, payload) {
				t.Fatalf("payload %d bytes, want %d", len(res.payload), len(payload))
			}
		})
	}

	t.Run("put streaming with crc trailer", func(t *testing.T) {
		// A non-seekable body forces aws-chunked with a checksum trailer.
		_, err := client.PutObject(ctx, &s3.PutObjectInput{
			Bucket: aws.String("bucket"), Key: aws.String("streamed obj"),
			Body: io.MultiReader(bytes.NewReader(payload)), ContentLength: aws.Int64(int64(len(payload))),
			ChecksumAlgorithm: "CRC32C",
		})
		res := tr.last(t)
		if err != nil || res.err != nil {
			t.Fatalf("sdk err %v, verify err %v", err, res.err)
		}
		if mode := res.header.Get("X-Amz-Content-Sha256"); mode != streamingUnsignedTrail {
			t.Fatalf("payload mode %q, want the aws-chunked trailer mode", mode)
		}
		if !bytes.Equal(res.payload, payload) || res.algo != "CRC32C" {
			t.Fatalf("payload %d bytes, checksum %q; headers %v", len(res.payload), res.algo, res.header)
		}
	})

	t.Run("get and list", func(t *testing.T) {
		if _, err := client.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("bucket"), Key: aws.String("a b/ü+%")}); err != nil {
			t.Fatalf("get: %v (verify: %v)", err, tr.last(t).err)
		}
		if _, err := client.ListObjectsV2(ctx, &s3.ListObjectsV2Input{
			Bucket: aws.String("bucket"), Prefix: aws.String("dir with space/+plus~"), Delimiter: aws.String("/"),
			StartAfter: aws.String("ünï"),
		}); err != nil {
			t.Fatalf("list: %v (verify: %v)", err, tr.last(t).err)
		}
	})

	t.Run("wrong secret", func(t *testing.T) {
		bad := s3.New(s3.Options{
			Region: testRegion, BaseEndpoint: aws.String("https://" + testHost), UsePathStyle: true,
			Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
				return aws.Credentials{AccessKeyID: testAK, SecretAccessKey: "wrong"}, nil
			}),
			HTTPClient: tr, RetryMaxAttempts: 1,
		})
		_, _ = bad.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("bucket"), Key: aws.String("k")})
		if err := tr.last(t).err; !errors.Is(err, ErrSignatureDoesNotMatch) {
			t.Fatalf("verify err %v", err)
		}
	})

	t.Run("presigned", func(t *testing.T) {
		pc := s3.NewPresignClient(client)
		for _, key := range awkwardKeys {
			get, err := pc.PresignGetObject(ctx, &s3.GetObjectInput{
				Bucket: aws.String("bucket"), Key: aws.String(key),
				ResponseContentDisposition: aws.String(`attachment; filename="x y.txt"`),
			}, s3.WithPresignExpires(time.Hour))
			if err != nil {
				t.Fatal(err)
			}
			r, err := http.NewRequest(get.Method, get.URL, nil)
			if err != nil {
				t.Fatal(err)
			}
			for k, vs := range get.SignedHeader {
				if !strings.EqualFold(k, "host") {
					r.Header[k] = vs
				}
			}
			vr, err := tr.v.Verify(serverSide(t, r))
			if err != nil {
				t.Fatalf("%s: %v", key, err)
			}
			if vr.Method != V4Presigned {
				t.Fatalf("method %v", vr.Method)
			}
		}
	})
}
