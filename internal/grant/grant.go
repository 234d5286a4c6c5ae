// Package grant says which buckets an application may reach and how:
// the `buckets:` of its spec, checked by its cachelets before they touch
// the store (Set.Allows) and turned into the store policy of its own
// identity there (Policy). It is pure: no I/O.
package grant

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// Access is what an application may do in a bucket.
type Access string

// The two kinds of access.
const (
	// ReadOnly: get, head and list objects.
	ReadOnly Access = "read-only"
	// ReadWrite: also put, copy and delete objects, multipart uploads,
	// and create the bucket if it does not exist.
	ReadWrite Access = "read-write"
)

// Valid reports whether a is one of the two kinds.
func (a Access) Valid() bool { return a == ReadOnly || a == ReadWrite }

// Bucket is one bucket granted to an application.
type Bucket struct {
	Name   string `json:"name" yaml:"name"`
	Access Access `json:"access" yaml:"access"`
}

// ErrInvalid marks every error of a bucket list.
var ErrInvalid = errors.New("invalid bucket grant")

// Validate checks every name (S3's bucket naming rules), every access,
// and that no bucket is named twice.
func Validate(buckets []Bucket) error {
	seen := map[string]bool{}
	for _, b := range buckets {
		if err := CheckBucketName(b.Name); err != nil {
			return fmt.Errorf("%w: %v", ErrInvalid, err)
		}
		if !b.Access.Valid() {
			return fmt.Errorf("%w: bucket %s: access %q: want %s or %s", ErrInvalid, b.Name, b.Access, ReadOnly, ReadWrite)
		}
		if seen[b.Name] {
			return fmt.Errorf("%w: bucket %s is listed twice", ErrInvalid, b.Name)
		}
		seen[b.Name] = true
	}
	return nil
}

// CheckBucketName checks S3's rules for bucket names: 3-63 characters
// of a-z, 0-9, '.' and '-', starting and ending with a letter or digit,
// no two adjacent periods, not shaped like an IP address, and none of
// S3's reserved prefixes and suffixes.
func CheckBucketName(b string) error {
	bad := func(why string) error { return fmt.Errorf("bucket name %q: %s", b, why) }
	if len(b) < 3 || len(b) > 63 {
		return bad("want 3-63 characters")
	}
	for i := 0; i < len(b); i++ {
		c := b[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case c == '-' || c == '.':
			if i == 0 || i == len(b)-1 {
				return bad("must start and end with a letter or digit")
			}
			if c == '.' && b[i-1] == '.' {
				return bad("two adjacent periods")
			}
		default:
			return bad("only a-z, 0-9, '.' and '-'")
		}
	}
	if parts := strings.Split(b, "."); len(parts) == 4 {
		ip := true
		for _, p := range parts {
			if _, err := strconv.Atoi(p); err != nil {
				ip = false
			}
		}
		if ip {
			return bad("shaped like an IP address")
		}
	}
	for _, p := range []string{"xn--", "sthree-", "amzn-s3-demo-"} {
		if strings.HasPrefix(b, p) {
			return bad("the prefix " + p + " is reserved")
		}
	}
	for _, s := range []string{"-s3alias", "--ol-s3", "--x-s3", ".mrap"} {
		if strings.HasSuffix(b, s) {
			return bad("the suffix " + s + " is reserved")
		}
	}
	return nil
}

// Set is the buckets an application's cachelet may reach. A nil *Set
// restricts nothing: a standalone cachelet serves every bucket its store
// keys reach. A non-nil one, even empty, allows exactly its buckets. Its
// methods may be called concurrently.
type Set struct {
	Buckets []Bucket `json:"buckets"`
}

// NewSet is the set of buckets, which must be valid (Validate).
func NewSet(buckets []Bucket) (*Set, error) {
	if err := Validate(buckets); err != nil {
		return nil, err
	}
	return &Set{Buckets: append([]Bucket{}, buckets...)}, nil
}

// Lookup is the access granted to bucket, if any. A nil set grants
// read-write everywhere.
func (s *Set) Lookup(bucket string) (Access, bool) {
	if s == nil {
		return ReadWrite, true
	}
	for _, b := range s.Buckets {
		if b.Name == bucket {
			return b.Access, true
		}
	}
	return "", false
}

// Allows reports whether bucket may be read (write false) or written.
func (s *Set) Allows(bucket string, write bool) bool {
	a, ok := s.Lookup(bucket)
	return ok && (a == ReadWrite || !write)
}

// Restricted reports whether the set restricts anything.
func (s *Set) Restricted() bool { return s != nil }

// The store actions each access allows, in the policy language S3 and
// MinIO share. Bucket-level actions apply to arn:aws:s3:::BUCKET, object
// actions to arn:aws:s3:::BUCKET/*. They cover what a client may do to
// the data of a bucket it was granted (every operation the cachelet
// passes through included: versions, tags, object lock, lifecycle,
// CORS, encryption); what belongs to the bucket's owner, the operator,
// stays out: deleting the bucket, its policy, its notifications (the
// platform's triggers), replication, ACLs and bypassing governance
// retention.
var (
	readBucketActions = []string{
		"s3:ListBucket", "s3:GetBucketLocation", "s3:ListBucketVersions",
		"s3:GetBucketVersioning", "s3:GetBucketTagging", "s3:GetBucketObjectLockConfiguration",
		"s3:GetLifecycleConfiguration", "s3:GetBucketCors", "s3:GetEncryptionConfiguration",
		// MinIO's change stream of the bucket, which cachelets follow
		// to notice writers outside hoard (ADR 0028); bucket-scoped,
		// unlike s3:ListenNotification (every bucket), never granted.
		"s3:ListenBucketNotification",
	}
	readObjectActions = []string{
		"s3:GetObject", "s3:GetObjectVersion", "s3:GetObjectAttributes", "s3:GetObjectVersionAttributes",
		"s3:GetObjectTagging", "s3:GetObjectVersionTagging", "s3:GetObjectRetention", "s3:GetObjectLegalHold",
	}
	writeBucketActions = []string{
		"s3:ListBucketMultipartUploads", "s3:CreateBucket",
		"s3:PutBucketVersioning", "s3:PutBucketTagging", "s3:PutBucketObjectLockConfiguration",
		"s3:PutLifecycleConfiguration", "s3:PutBucketCors", "s3:DeleteBucketCors", "s3:PutEncryptionConfiguration",
	}
	writeObjectActions = []string{
		"s3:PutObject", "s3:DeleteObject", "s3:DeleteObjectVersion", "s3:AbortMultipartUpload", "s3:ListMultipartUploadParts",
		"s3:PutObjectTagging", "s3:PutObjectVersionTagging", "s3:DeleteObjectTagging", "s3:DeleteObjectVersionTagging",
		"s3:PutObjectRetention", "s3:PutObjectLegalHold",
	}
)

type policyDoc struct {
	Version   string      `json:"Version"`
	Statement []statement `json:"Statement"`
}

type statement struct {
	Sid      string   `json:"Sid,omitempty"`
	Effect   string   `json:"Effect"`
	Action   []string `json:"Action"`
	Resource []string `json:"Resource"`
}

// Policy is the identity policy (IAM's JSON form, which MinIO speaks
// too) that lets an identity reach exactly buckets: read-only buckets
// get, head and list, objects and their versions, tags, retention and
// the bucket's data settings; read-write ones also put, delete, run
// multipart uploads, tag, lock, create the bucket and change its
// versioning, tags, object lock, lifecycle, CORS and encryption. Nothing
// else, no bucket listing (ListAllMyBuckets: MinIO then lists the
// buckets the identity may list, AWS refuses), no bucket deletion, no
// policies, notifications, replication or ACLs. With no buckets
// the policy allows nothing at all (a statement denying every S3 action,
// since an IAM policy needs at least one).
func Policy(buckets []Bucket) ([]byte, error) {
	if err := Validate(buckets); err != nil {
		return nil, err
	}
	sorted := append([]Bucket{}, buckets...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	var ro, rw []string
	for _, b := range sorted {
		if b.Access == ReadWrite {
			rw = append(rw, b.Name)
		} else {
			ro = append(ro, b.Name)
		}
	}
	all := append(append([]string{}, ro...), rw...)
	sort.Strings(all)
	doc := policyDoc{Version: "2012-10-17"}
	add := func(sid string, actions []string, names []string, objects bool) {
		if len(names) == 0 {
			return
		}
		res := make([]string, len(names))
		for i, n := range names {
			res[i] = "arn:aws:s3:::" + n
			if objects {
				res[i] += "/*"
			}
		}
		doc.Statement = append(doc.Statement, statement{Sid: sid, Effect: "Allow", Action: actions, Resource: res})
	}
	add("ReadBuckets", readBucketActions, all, false)
	add("ReadObjects", readObjectActions, all, true)
	add("WriteBuckets", writeBucketActions, rw, false)
	add("WriteObjects", writeObjectActions, rw, true)
	if len(doc.Statement) == 0 {
		doc.Statement = []statement{{Sid: "Nothing", Effect: "Deny", Action: []string{"s3:*"}, Resource: []string{"arn:aws:s3:::*"}}}
	}
	return json.MarshalIndent(doc, "", "  ")
}
