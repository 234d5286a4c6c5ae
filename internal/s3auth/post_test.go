package s3auth

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"testing"
	"time"

	"github.com/hoard-io/hoard/internal/clock"
)

// TestVerifyPostPolicy: a browser-form upload's policy signed with the
// client's key passes with its conditions; a wrong signature, another
// key's, an expired policy, Signature Version 2 and broken fields do not.
func TestVerifyPostPolicy(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	v := newTestVerifier(t, clock.NewFake(now))
	sign := func(secret, policy string) string {
		k := signingKeyForTest(secret, "20260301", testRegion, "s3")
		m := hmac.New(sha256.New, k)
		m.Write([]byte(policy))
		return hex.EncodeToString(m.Sum(nil))
	}
	doc := func(exp time.Time) string {
		return base64.StdEncoding.EncodeToString([]byte(`{"expiration":"` + exp.Format(time.RFC3339) + `","conditions":[{"bucket":"b"},["starts-with","$key","up/"]]}`))
	}
	form := func(secret string, exp time.Time) map[string]string {
		p := doc(exp)
		return map[string]string{"key": "up/x", "policy": p, "x-amz-algorithm": "AWS4-HMAC-SHA256",
			"x-amz-credential": testAK + "/20260301/" + testRegion + "/s3/aws4_request", "x-amz-date": "20260301T120000Z",
			"x-amz-signature": sign(secret, p)}
	}
	p, err := v.VerifyPostPolicy(form(testSK, now.Add(time.Hour)))
	if err != nil || p.AccessKey != testAK || len(p.Conditions) != 2 {
		t.Fatalf("a good form: %+v, %v", p, err)
	}
	for name, tc := range map[string]struct {
		f    map[string]string
		want error
	}{
		"wrong secret": {form("not the secret", now.Add(time.Hour)), ErrSignatureDoesNotMatch},
		"expired":      {form(testSK, now.Add(-time.Second)), ErrAccessDenied},
		"v2":           {map[string]string{"awsaccesskeyid": testAK, "policy": doc(now.Add(time.Hour)), "signature": "x"}, ErrAccessDenied},
		"no signature": {func() map[string]string {
			f := form(testSK, now.Add(time.Hour))
			delete(f, "x-amz-signature")
			return f
		}(), ErrAccessDenied},
		"bad credential": {func() map[string]string {
			f := form(testSK, now.Add(time.Hour))
			f["x-amz-credential"] = "x"
			return f
		}(), ErrAccessDenied},
		"unknown key": {func() map[string]string {
			f := form(testSK, now.Add(time.Hour))
			f["x-amz-credential"] = "NOSUCHKEY/20260301/" + testRegion + "/s3/aws4_request"
			return f
		}(), ErrInvalidAccessKeyID},
	} {
		if _, err := v.VerifyPostPolicy(tc.f); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", name, err, tc.want)
		}
	}
}

// signingKeyForTest derives a SigV4 signing key, independently of the
// verifier's cache.
func signingKeyForTest(secret, date, region, service string) []byte {
	mac := func(k []byte, s string) []byte {
		m := hmac.New(sha256.New, k)
		m.Write([]byte(s))
		return m.Sum(nil)
	}
	return mac(mac(mac(mac([]byte("AWS4"+secret), date), region), service), "aws4_request")
}
