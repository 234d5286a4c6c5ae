package s3api

import "net/http"

// errBucketNotGranted answers a request to a bucket the application was
// not granted, or a write to one it may only read, before anything
// reaches the store.
var errBucketNotGranted = apiErr("AccessDenied", http.StatusForbidden, "Access Denied.")

// readOps are the operations that only read the bucket they name. Every
// other operation on a bucket needs read-write access, and so does any
// operation hoard does not implement (answered 501 when allowed).
var readOps = map[string]bool{
	"GetObject": true, "HeadObject": true, "ListObjects": true, "ListObjectsV2": true,
	"HeadBucket": true, "GetBucketLocation": true,
}

// granted reports whether the request stays within the buckets the
// application was granted (Config.Grants): reads of granted buckets,
// writes to read-write ones, a CopyObject's source readable as well as
// its destination writable. Deleting a bucket is never granted. The
// service-level ListBuckets is allowed and answers with granted buckets
// only. Without Grants, everything is.
func (s *Server) granted(r *http.Request, rq *request) bool {
	g := s.cfg.Grants
	if !g.Restricted() || rq.bucket == "" {
		return true
	}
	if rq.op == "DeleteBucket" {
		return false
	}
	if !g.Allows(rq.bucket, !readOps[rq.op]) {
		return false
	}
	if rq.op == "CopyObject" || rq.op == "UploadPartCopy" {
		src, err := parseCopySource(r.Header.Get("x-amz-copy-source"))
		// An unreadable source is the handler's to refuse.
		return err != nil || g.Allows(src.Bucket, false)
	}
	return true
}
