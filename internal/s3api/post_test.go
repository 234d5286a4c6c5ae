package s3api

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hoard-io/hoard/internal/grant"
)

// postForm sends a browser-form upload of data to bucket, its policy
// signed with secret (the test key's unless told otherwise).
func (s *testServer) postForm(t *testing.T, bucket, key, secret string, data []byte) *http.Response {
	t.Helper()
	now := time.Now().UTC()
	date := now.Format("20060102")
	policy := base64.StdEncoding.EncodeToString([]byte(fmt.Sprintf(
		`{"expiration":%q,"conditions":[{"bucket":%q},{"key":%q}]}`, now.Add(time.Hour).Format(time.RFC3339), bucket, key)))
	mac := func(k []byte, s string) []byte {
		m := hmac.New(sha256.New, k)
		m.Write([]byte(s))
		return m.Sum(nil)
	}
	sk := mac(mac(mac(mac([]byte("AWS4"+secret), date), testRegion), "s3"), "aws4_request")
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	for _, f := range [][2]string{{"key", key}, {"x-amz-algorithm", "AWS4-HMAC-SHA256"},
		{"x-amz-credential", testAK + "/" + date + "/" + testRegion + "/s3/aws4_request"},
		{"x-amz-date", now.Format("20060102T150405Z")}, {"policy", policy},
		{"x-amz-signature", hex.EncodeToString(mac(sk, policy))}} {
		if err := mw.WriteField(f[0], f[1]); err != nil {
			t.Fatal(err)
		}
	}
	fw, _ := mw.CreateFormFile("file", "f")
	fw.Write(data)
	mw.Close()
	req, _ := http.NewRequest("POST", s.URL+"/"+bucket, &body)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// TestPostFormOutsideGrants: a browser-form upload signed with the
// application's own key is refused for a bucket outside its grants, or
// read-only to it, before the store sees it; a forged signature is
// refused; nothing is written.
func TestPostFormOutsideGrants(t *testing.T) {
	g, err := grant.NewSet([]grant.Bucket{{Name: "mine", Access: grant.ReadWrite}, {Name: "shared", Access: grant.ReadOnly}})
	if err != nil {
		t.Fatal(err)
	}
	s := newTestServerWith(t, Config{Region: testRegion, Grants: g})
	ctx := context.Background()
	for _, b := range []string{"mine", "shared", "theirs"} {
		if err := s.store.CreateBucket(ctx, b, testRegion); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		what, bucket, secret string
		status               int
		code                 string
	}{
		{"another application's bucket", "theirs", testSK, 403, "AccessDenied"},
		{"a read-only bucket", "shared", testSK, 403, "AccessDenied"},
		{"a forged signature", "mine", "not the secret", 403, "SignatureDoesNotMatch"},
	} {
		resp := s.postForm(t, tc.bucket, "k", tc.secret, []byte("evil"))
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.status || !strings.Contains(string(body), "<Code>"+tc.code+"</Code>") {
			t.Errorf("%s: %d %s, want %d %s", tc.what, resp.StatusCode, body, tc.status, tc.code)
		}
		if _, err := s.store.Stat(ctx, tc.bucket, "k"); err == nil {
			t.Errorf("%s: the object was written", tc.what)
		}
	}
	// The rightful form passes the checks; this store takes no request
	// passed through, so its answer says that, not a refusal.
	resp := s.postForm(t, "mine", "k", testSK, []byte("ok"))
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotImplemented {
		t.Errorf("a rightful form: %d, want 501 from a store without pass-through", resp.StatusCode)
	}
}
