package s3api

import "net/http"

// errBucketNotGranted answers a request to a bucket the application was
// not granted, or a write to one it may only read, before anything
// reaches the store.
var errBucketNotGranted = apiErr("AccessDenied", http.StatusForbidden, "Access Denied.")

// granted reports whether the request stays within the buckets the
// application was granted (Config.Grants), whether the cachelet answers
// it or passes it to the store: reads (GET and HEAD, which S3 never
// makes change anything) of granted buckets, any other method only on
// read-write ones, and the source a request copies from (CopyObject,
// UploadPartCopy: x-amz-copy-source) readable as well. Deleting a bucket
// is never granted, nor is any service-level operation but ListBuckets,
// which answers with granted buckets only. Without Grants, everything is.
func (s *Server) granted(r *http.Request, rq *request) bool {
	g := s.cfg.Grants
	if !g.Restricted() {
		return true
	}
	if rq.bucket == "" {
		return rq.op == "ListBuckets"
	}
	if rq.op == "DeleteBucket" {
		return false
	}
	write := r.Method != http.MethodGet && r.Method != http.MethodHead
	if !g.Allows(rq.bucket, write) {
		return false
	}
	if v := r.Header.Get("x-amz-copy-source"); v != "" {
		// A source that does not parse cannot be shown to be granted.
		src, err := parseCopySource(v)
		return err == nil && g.Allows(src.Bucket, false)
	}
	return true
}
