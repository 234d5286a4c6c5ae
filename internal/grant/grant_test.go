package grant

import (
	"encoding/json"
	"errors"
	"slices"
	"testing"
)

func TestCheckBucketName(t *testing.T) {
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"photos", true}, {"my.photos-2", true}, {"abc", true}, {"a1-b2.c3", true},
		{"ab", false}, {"", false}, {string(make([]byte, 64)), false},
		{"Photos", false}, {"-photos", false}, {"photos-", false}, {".photos", false}, {"photos.", false},
		{"my..photos", false}, {"my_photos", false}, {"192.168.1.1", false}, {"xn--photos", false},
		{"photos-s3alias", false}, {"sthree-x", false}, {"a/b", false},
	} {
		if err := CheckBucketName(tc.name); (err == nil) != tc.ok {
			t.Errorf("CheckBucketName(%q) = %v, want ok %v", tc.name, err, tc.ok)
		}
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		what string
		in   []Bucket
		ok   bool
	}{
		{"none", nil, true},
		{"two", []Bucket{{"a-b", ReadOnly}, {"c-d", ReadWrite}}, true},
		{"bad access", []Bucket{{"a-b", "write"}}, false},
		{"no access", []Bucket{{"a-b", ""}}, false},
		{"bad name", []Bucket{{"A", ReadOnly}}, false},
		{"twice", []Bucket{{"a-b", ReadOnly}, {"a-b", ReadWrite}}, false},
	} {
		err := Validate(tc.in)
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrInvalid)) {
			t.Errorf("%s: Validate = %v, want ok %v", tc.what, err, tc.ok)
		}
	}
}

func TestSetAllows(t *testing.T) {
	s, err := NewSet([]Bucket{{"ro-bkt", ReadOnly}, {"rw-bkt", ReadWrite}})
	if err != nil {
		t.Fatal(err)
	}
	var none Set
	var all *Set
	for _, tc := range []struct {
		set    *Set
		bucket string
		write  bool
		want   bool
	}{
		{s, "ro-bkt", false, true}, {s, "ro-bkt", true, false},
		{s, "rw-bkt", false, true}, {s, "rw-bkt", true, true},
		{s, "other", false, false}, {s, "other", true, false}, {s, "", false, false},
		{&none, "ro-bkt", false, false},
		{all, "anything", true, true},
	} {
		if got := tc.set.Allows(tc.bucket, tc.write); got != tc.want {
			t.Errorf("%v.Allows(%q, write %v) = %v, want %v", tc.set, tc.bucket, tc.write, got, tc.want)
		}
	}
	if all.Restricted() || !none.Restricted() {
		t.Error("Restricted: a nil set restricts nothing, an empty one everything")
	}
}

func TestSetJSON(t *testing.T) {
	// An empty set must stay a restriction through the document.
	data, _ := json.Marshal(struct {
		G *Set `json:"g,omitempty"`
	}{G: &Set{}})
	var back struct {
		G *Set `json:"g,omitempty"`
	}
	if err := json.Unmarshal(data, &back); err != nil || back.G == nil || back.G.Allows("x-y-z", false) {
		t.Fatalf("%s -> %+v, %v: an empty set must survive JSON as a restriction", data, back.G, err)
	}
}

func TestPolicy(t *testing.T) {
	data, err := Policy([]Bucket{{"rw-bkt", ReadWrite}, {"ro-bkt", ReadOnly}})
	if err != nil {
		t.Fatal(err)
	}
	var doc policyDoc
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	// What each resource is allowed, flattened.
	allowed := map[string][]string{}
	for _, st := range doc.Statement {
		if st.Effect != "Allow" {
			t.Fatalf("unexpected effect %q", st.Effect)
		}
		for _, r := range st.Resource {
			allowed[r] = append(allowed[r], st.Action...)
		}
	}
	for r, acts := range allowed {
		slices.Sort(acts)
		allowed[r] = acts
	}
	roBucket := []string{"s3:GetBucketCors", "s3:GetBucketLocation", "s3:GetBucketObjectLockConfiguration", "s3:GetBucketTagging",
		"s3:GetBucketVersioning", "s3:GetEncryptionConfiguration", "s3:GetLifecycleConfiguration", "s3:ListBucket", "s3:ListBucketVersions", "s3:ListenBucketNotification"}
	roObject := []string{"s3:GetObject", "s3:GetObjectAttributes", "s3:GetObjectLegalHold", "s3:GetObjectRetention", "s3:GetObjectTagging",
		"s3:GetObjectVersion", "s3:GetObjectVersionAttributes", "s3:GetObjectVersionTagging"}
	rwBucket := sorted(roBucket, "s3:CreateBucket", "s3:DeleteBucketCors", "s3:ListBucketMultipartUploads", "s3:PutBucketCors",
		"s3:PutBucketObjectLockConfiguration", "s3:PutBucketTagging", "s3:PutBucketVersioning", "s3:PutEncryptionConfiguration",
		"s3:PutLifecycleConfiguration")
	rwObject := sorted(roObject, "s3:AbortMultipartUpload", "s3:DeleteObject", "s3:DeleteObjectTagging", "s3:DeleteObjectVersion",
		"s3:DeleteObjectVersionTagging", "s3:ListMultipartUploadParts", "s3:PutObject", "s3:PutObjectLegalHold",
		"s3:PutObjectRetention", "s3:PutObjectTagging", "s3:PutObjectVersionTagging")
	want := map[string][]string{
		"arn:aws:s3:::ro-bkt":   roBucket,
		"arn:aws:s3:::ro-bkt/*": roObject,
		"arn:aws:s3:::rw-bkt":   rwBucket,
		"arn:aws:s3:::rw-bkt/*": rwObject,
	}
	// What stays the operator's is never granted.
	for r, acts := range allowed {
		for _, a := range acts {
			switch a {
			case "s3:*", "s3:DeleteBucket", "s3:ForceDeleteBucket", "s3:PutBucketPolicy", "s3:DeleteBucketPolicy", "s3:GetBucketPolicy",
				"s3:PutBucketNotification", "s3:PutReplicationConfiguration", "s3:BypassGovernanceRetention", "s3:ListAllMyBuckets":
				t.Errorf("%s allows %s", r, a)
			}
		}
	}
	if len(allowed) != len(want) {
		t.Fatalf("resources %v, want %v", allowed, want)
	}
	for r, acts := range want {
		if !slices.Equal(allowed[r], acts) {
			t.Errorf("%s: %v, want %v", r, allowed[r], acts)
		}
	}

	empty, err := Policy(nil)
	if err != nil {
		t.Fatal(err)
	}
	var ed policyDoc
	_ = json.Unmarshal(empty, &ed)
	if len(ed.Statement) != 1 || ed.Statement[0].Effect != "Deny" {
		t.Fatalf("no buckets: %s, want one statement denying everything", empty)
	}
	if _, err := Policy([]Bucket{{"x", ReadOnly}}); err == nil {
		t.Fatal("an invalid bucket made a policy")
	}
}

// sorted is base and more, sorted.
func sorted(base []string, more ...string) []string {
	out := append(append([]string{}, base...), more...)
	slices.Sort(out)
	return out
}
