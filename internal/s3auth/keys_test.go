package s3auth

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsv4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

// rotatingCreds is a credential table whose secrets change.
type rotatingCreds struct {
	mu sync.Mutex
	m  map[string]string
}

func (c *rotatingCreds) Secret(ak string) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	sk, ok := c.m[ak]
	return sk, ok
}

func (c *rotatingCreds) set(ak, sk string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.m[ak] = sk
}

// signedGet is a GET signed with secret at t, as the server sees it.
func signedGet(t *testing.T, secret string, at time.Time) *http.Request {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, "http://"+testHost+"/bucket/key", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Amz-Content-Sha256", sha256Hex(nil))
	s := awsv4.NewSigner(func(o *awsv4.SignerOptions) { o.DisableURIPathEscaping = true })
	if err := s.SignHTTP(context.Background(), aws.Credentials{AccessKeyID: testAK, SecretAccessKey: secret},
		req, sha256Hex(nil), "s3", testRegion, at); err != nil {
		t.Fatal(err)
	}
	return serverSide(t, req)
}

// Derived keys are kept per secret: after a secret changes, requests
// signed with the old one fail and those signed with the new one pass,
// on any day; the cache stays bounded.
func TestSigningKeysFollowTheSecret(t *testing.T) {
	creds := &rotatingCreds{m: map[string]string{testAK: "first-secret"}}
	clk := fixedClock(fuzzTime)
	v, err := New(Config{Region: testRegion, Clock: clk, Domains: []string{testHost}}, creds)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 { // the second time from the cache
		if _, err := v.Verify(signedGet(t, "first-secret", fuzzTime)); err != nil {
			t.Fatalf("request signed with the secret: %v", err)
		}
	}
	creds.set(testAK, "second-secret")
	if _, err := v.Verify(signedGet(t, "first-secret", fuzzTime)); err == nil {
		t.Fatal("a request signed with the old secret passed")
	}
	if _, err := v.Verify(signedGet(t, "second-secret", fuzzTime)); err != nil {
		t.Fatalf("request signed with the new secret: %v", err)
	}
	if _, err := v.Verify(signedGet(t, "wrong", fuzzTime)); err == nil {
		t.Fatal("a request signed with a wrong secret passed")
	}
	for i := range 2 * sigKeysMax {
		v.keys.get("s", "2026010"+string(rune('0'+i%10)), "r", string(rune('a'+i%26))+string(rune('a'+i/26)))
	}
	if n := len(v.keys.m); n > sigKeysMax {
		t.Errorf("%d derived keys kept, bound %d", n, sigKeysMax)
	}
}
