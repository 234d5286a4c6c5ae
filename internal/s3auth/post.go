package s3auth

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// PostPolicy is a browser-form upload's policy, its signature verified.
type PostPolicy struct {
	// AccessKey is the client's, whose secret signed the policy.
	AccessKey string
	// Expiration is the policy's, as written; Conditions its conditions,
	// each as written (the store checks them against the form).
	Expiration string
	Conditions []json.RawMessage
}

// maxPolicyBytes bounds a decoded policy document.
const maxPolicyBytes = 64 << 10

// VerifyPostPolicy checks a browser-form upload (POST Object) signed with
// Signature Version 4: fields are the form's fields by lower-case name.
// The policy's signature is HMAC-SHA256 of the base64 policy under the
// signing key of the credential's access key, date, region and service;
// the policy must not have expired. Its other conditions are the store's
// to check against the form, once signed again for the store.
func (v *Verifier) VerifyPostPolicy(fields map[string]string) (*PostPolicy, error) {
	if alg := fields["x-amz-algorithm"]; alg != v4Algorithm {
		if fields["awsaccesskeyid"] != "" {
			return nil, fmt.Errorf("%w: browser-form uploads signed with Signature Version 2 are not supported", ErrAccessDenied)
		}
		return nil, fmt.Errorf("%w: x-amz-algorithm %q", ErrAccessDenied, truncate(alg))
	}
	policy, sig := fields["policy"], fields["x-amz-signature"]
	if policy == "" || sig == "" {
		return nil, fmt.Errorf("%w: the form lacks its policy or signature", ErrAccessDenied)
	}
	parts := strings.Split(fields["x-amz-credential"], "/")
	if len(parts) != 5 || parts[4] != scopeTerminator || parts[3] != "s3" {
		return nil, fmt.Errorf("%w: x-amz-credential %q", ErrAccessDenied, truncate(fields["x-amz-credential"]))
	}
	secret, err := v.lookup(parts[0])
	if err != nil {
		return nil, err
	}
	key := v.keys.get(secret, parts[1], parts[2], parts[3])
	mac := hmac.New(sha256.New, key.key)
	mac.Write([]byte(policy))
	want := mac.Sum(nil)
	got, err := hex.DecodeString(sig)
	if err != nil || !hmac.Equal(want, got) {
		return nil, ErrSignatureDoesNotMatch
	}
	doc, err := base64.StdEncoding.DecodeString(policy)
	if err != nil || len(doc) > maxPolicyBytes {
		return nil, fmt.Errorf("%w: the policy is not base64 JSON of at most %d bytes", ErrAccessDenied, maxPolicyBytes)
	}
	var p struct {
		Expiration string            `json:"expiration"`
		Conditions []json.RawMessage `json:"conditions"`
	}
	if err := json.Unmarshal(doc, &p); err != nil {
		return nil, fmt.Errorf("%w: the policy is not JSON: %v", ErrAccessDenied, err)
	}
	exp, err := time.Parse(time.RFC3339Nano, p.Expiration)
	if err != nil {
		return nil, fmt.Errorf("%w: policy expiration %q", ErrAccessDenied, truncate(p.Expiration))
	}
	if !v.now().Before(exp) {
		return nil, fmt.Errorf("%w: Invalid according to Policy: Policy expired", ErrAccessDenied)
	}
	return &PostPolicy{AccessKey: parts[0], Expiration: p.Expiration, Conditions: p.Conditions}, nil
}
