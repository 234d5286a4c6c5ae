package s3store

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"time"

	"github.com/minio/minio-go/v7/pkg/signer"
)

// postAuthFields are a browser-form upload's fields that carry its
// signature: the store's replace the client's.
var postAuthFields = map[string]bool{
	"policy": true, "x-amz-signature": true, "x-amz-credential": true, "x-amz-algorithm": true,
	"x-amz-date": true, "x-amz-security-token": true, "awsaccesskeyid": true, "signature": true,
}

// FormSignedHeader marks a request passed through (Pass) whose form
// carries the store's signature (SignPostPolicy): it goes unsigned, as the
// store refuses a request authenticated twice. The header itself is not
// sent.
const FormSignedHeader = "X-Hoard-Form-Signed"

// IsPostAuthField reports whether a form field (by its lower-case name)
// carries a browser-form upload's signature.
func IsPostAuthField(name string) bool { return postAuthFields[name] }

// SignPostPolicy signs a browser-form upload's policy again for the store
// identity (POST Object, ADR 18): the client's conditions, less those on
// its own credential, date and algorithm, and the store identity's. It
// returns the form fields that carry the store's signature: policy,
// x-amz-algorithm, x-amz-credential, x-amz-date and x-amz-signature.
func (s *Store) SignPostPolicy(expiration string, conditions []json.RawMessage, now time.Time) (map[string]string, error) {
	now = now.UTC()
	region := s.region
	if region == "" {
		region = "us-east-1"
	}
	cred := signer.GetCredential(s.accessKey, region, now, signer.ServiceTypeS3)
	date := now.Format("20060102T150405Z")
	kept := make([]json.RawMessage, 0, len(conditions)+3)
	for _, c := range conditions {
		if !authCondition(c) {
			kept = append(kept, c)
		}
	}
	for _, f := range [][2]string{{"x-amz-credential", cred}, {"x-amz-algorithm", "AWS4-HMAC-SHA256"}, {"x-amz-date", date}} {
		b, err := json.Marshal(map[string]string{f[0]: f[1]})
		if err != nil {
			return nil, err
		}
		kept = append(kept, b)
	}
	doc, err := json.Marshal(struct {
		Expiration string            `json:"expiration"`
		Conditions []json.RawMessage `json:"conditions"`
	}{expiration, kept})
	if err != nil {
		return nil, err
	}
	policy := base64.StdEncoding.EncodeToString(doc)
	return map[string]string{
		"policy": policy, "x-amz-algorithm": "AWS4-HMAC-SHA256", "x-amz-credential": cred, "x-amz-date": date,
		"x-amz-signature": signer.PostPresignSignatureV4(policy, now, s.secretKey, region),
	}, nil
}

// authCondition reports whether a policy condition is about a signature
// field ({"x-amz-credential": ...} or ["eq", "$x-amz-date", ...]).
func authCondition(c json.RawMessage) bool {
	var m map[string]any
	if json.Unmarshal(c, &m) == nil {
		for k := range m {
			if postAuthFields[strings.ToLower(k)] {
				return true
			}
		}
		return false
	}
	var l []any
	if json.Unmarshal(c, &l) == nil && len(l) == 3 {
		if f, ok := l[1].(string); ok {
			return postAuthFields[strings.ToLower(strings.TrimPrefix(f, "$"))]
		}
	}
	return false
}
