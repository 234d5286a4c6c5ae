package s3api

import (
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/hoard-io/hoard/internal/checksum"
	"github.com/hoard-io/hoard/internal/store"
)

func (s *Server) listBuckets(w http.ResponseWriter, r *http.Request, rq *request) error {
	buckets, err := s.cl.Store().ListBuckets(r.Context())
	if err != nil {
		return err
	}
	res := listAllMyBucketsResult{NS: s3NS, Owner: s.owner(rq)}
	for _, b := range buckets {
		if !s.cfg.Grants.Allows(b.Name, false) {
			continue // not this application's
		}
		res.Buckets = append(res.Buckets, bucketEntry{Name: b.Name, CreationDate: b.CreationDate.UTC().Format(timeFormatXML)})
	}
	return writeXML(w, r, res)
}

func (s *Server) owner(rq *request) owner {
	return owner{ID: rq.auth.AccessKey, DisplayName: rq.auth.AccessKey}
}

func (s *Server) getBucketLocation(w http.ResponseWriter, r *http.Request, rq *request) error {
	if err := s.cl.Store().HeadBucket(r.Context(), rq.bucket); err != nil {
		return err
	}
	loc := s.cfg.Region
	if loc == "us-east-1" {
		loc = "" // S3's historical answer for the default region
	}
	return writeXML(w, r, locationConstraint{NS: s3NS, Location: loc})
}

func (s *Server) headBucket(w http.ResponseWriter, r *http.Request, rq *request) error {
	if err := s.cl.Store().HeadBucket(r.Context(), rq.bucket); err != nil {
		return err
	}
	w.Header().Set("x-amz-bucket-region", s.cfg.Region)
	w.WriteHeader(http.StatusOK)
	return nil
}

func (s *Server) createBucket(w http.ResponseWriter, r *http.Request, rq *request) error {
	region := s.cfg.Region
	if rq.auth.DecodedLength != 0 {
		var conf createBucketConfiguration
		if err := readXML(r, &conf); err != nil {
			return err
		}
		if conf.LocationConstraint != "" && conf.LocationConstraint != s.cfg.Region {
			return apiErr("InvalidLocationConstraint", http.StatusBadRequest,
				"The specified location-constraint is not valid for this endpoint, which serves "+s.cfg.Region+".")
		}
	}
	if err := s.cl.Store().CreateBucket(r.Context(), rq.bucket, region); err != nil {
		return err
	}
	w.Header().Set("Location", "/"+rq.bucket)
	w.WriteHeader(http.StatusOK)
	return nil
}

func (s *Server) deleteBucket(w http.ResponseWriter, r *http.Request, rq *request) error {
	if err := s.cl.DeleteBucket(r.Context(), rq.bucket); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// listParams reads the parameters shared by both listing versions.
func listParams(q url.Values) (store.ListOptions, bool, error) {
	o := store.ListOptions{Prefix: q.Get("prefix"), Delimiter: q.Get("delimiter"), MaxKeys: 1000}
	if v := q.Get("max-keys"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return o, false, apiErr("InvalidArgument", http.StatusBadRequest, "max-keys must be a non-negative integer.")
		}
		if n < o.MaxKeys {
			o.MaxKeys = n
		}
	}
	encode := false
	switch et := q.Get("encoding-type"); et {
	case "":
	case "url":
		encode = true
	default:
		return o, false, apiErr("InvalidArgument", http.StatusBadRequest, "Invalid Encoding Method specified in Request.")
	}
	return o, encode, nil
}

// encodeKey URL-encodes a key for listings asked with encoding-type=url,
// as S3 does: form encoding with '/' left as is (clients decode with
// unquote_plus or similar).
func encodeKey(encode bool, s string) string {
	if !encode {
		return s
	}
	return strings.ReplaceAll(url.QueryEscape(s), "%2F", "/")
}

func (s *Server) listObjectsV1(w http.ResponseWriter, r *http.Request, rq *request) error {
	o, enc, err := listParams(rq.query)
	if err != nil {
		return err
	}
	o.V1 = true
	o.StartAfter = rq.query.Get("marker")
	res := listBucketResultV1{NS: s3NS, Name: rq.bucket, MaxKeys: o.MaxKeys,
		Prefix: encodeKey(enc, o.Prefix), Marker: encodeKey(enc, o.StartAfter), Delimiter: encodeKey(enc, o.Delimiter)}
	if enc {
		res.EncodingType = "url"
	}
	if o.MaxKeys > 0 {
		page, err := s.cl.Store().List(r.Context(), rq.bucket, o)
		if err != nil {
			return err
		}
		res.IsTruncated = page.IsTruncated
		res.Contents, res.CommonPrefixes = listEntries(page, enc, nil)
		if page.IsTruncated && o.Delimiter != "" {
			res.NextMarker = encodeKey(enc, lastName(page))
		}
	} else if err := s.cl.Store().HeadBucket(r.Context(), rq.bucket); err != nil {
		return err
	}
	return writeXML(w, r, res)
}

func (s *Server) listObjectsV2(w http.ResponseWriter, r *http.Request, rq *request) error {
	o, enc, err := listParams(rq.query)
	if err != nil {
		return err
	}
	q := rq.query
	o.StartAfter = q.Get("start-after")
	o.ContinuationToken = q.Get("continuation-token")
	if _, ok := q["continuation-token"]; ok && o.ContinuationToken == "" {
		return apiErr("InvalidArgument", http.StatusBadRequest, "The continuation token provided is incorrect.")
	}
	o.FetchOwner = q.Get("fetch-owner") == "true"
	res := listBucketResultV2{NS: s3NS, Name: rq.bucket, MaxKeys: o.MaxKeys,
		Prefix: encodeKey(enc, o.Prefix), StartAfter: encodeKey(enc, o.StartAfter),
		Delimiter: encodeKey(enc, o.Delimiter), ContinuationToken: o.ContinuationToken}
	if enc {
		res.EncodingType = "url"
	}
	if o.MaxKeys > 0 {
		page, err := s.cl.Store().List(r.Context(), rq.bucket, o)
		if err != nil {
			return err
		}
		var own *owner
		if o.FetchOwner {
			ow := s.owner(rq)
			own = &ow
		}
		res.IsTruncated = page.IsTruncated
		res.NextContinuationToken = page.NextContinuationToken
		res.Contents, res.CommonPrefixes = listEntries(page, enc, own)
		res.KeyCount = len(res.Contents) + len(res.CommonPrefixes)
	} else if err := s.cl.Store().HeadBucket(r.Context(), rq.bucket); err != nil {
		return err
	}
	return writeXML(w, r, res)
}

func listEntries(page store.ListResult, enc bool, own *owner) ([]objectEntry, []commonPrefix) {
	objs := make([]objectEntry, 0, len(page.Objects))
	for _, o := range page.Objects {
		objs = append(objs, objectEntry{Key: encodeKey(enc, o.Key), LastModified: o.LastModified.UTC().Format(timeFormatXML),
			ETag: `"` + o.ETag + `"`, Size: o.Size, Owner: own, StorageClass: "STANDARD"})
	}
	var cps []commonPrefix
	for _, p := range page.CommonPrefixes {
		cps = append(cps, commonPrefix{Prefix: encodeKey(enc, p)})
	}
	return objs, cps
}

// lastName is V1's NextMarker: the last key or common prefix of the page.
func lastName(page store.ListResult) string {
	if page.NextMarker != "" {
		return page.NextMarker
	}
	last := ""
	if n := len(page.Objects); n > 0 {
		last = page.Objects[n-1].Key
	}
	if n := len(page.CommonPrefixes); n > 0 && page.CommonPrefixes[n-1] > last {
		last = page.CommonPrefixes[n-1]
	}
	return last
}

func (s *Server) deleteObjects(w http.ResponseWriter, r *http.Request, rq *request) error {
	var req deleteRequest
	data, err := readXMLData(r, &req)
	if errors.Is(err, errMalformedXML) && s.canPass() && !hasDigest(r.Header) {
		// The stores ask for the document's digest before they read it
		// (MinIO MissingContentMD5, versitygw InvalidRequest): theirs is
		// the answer, and they delete nothing. Should a store take such
		// a document after all, the keys it named are not known here:
		// everything cached of the bucket is dropped.
		if err := s.cl.Settle(r.Context(), rq.bucket); err != nil {
			return err
		}
		err = s.passWith(w, r, rq, data, nil)
		if sw, ok := w.(*statusWriter); err == nil && (!ok || sw.status/100 == 2) {
			s.log.Warn("the store took a DeleteObjects document hoard cannot read: the bucket's cached objects are dropped",
				"bucket", rq.bucket, "request_id", rq.id)
			s.cl.DropPrefix(rq.bucket, "")
		}
		return err
	}
	if err != nil {
		return err
	}
	if s.canPass() || req.versioned() {
		// The store deletes and answers (versions are its to delete
		// anyway), the request as it is, its keys invalidated around
		// it. A document that does not parse here never goes: the
		// keys it would delete are not known.
		keys := make([]string, 0, len(req.Objects))
		for _, o := range req.Objects {
			keys = append(keys, o.Key)
		}
		return s.passWith(w, r, rq, data, keys)
	}
	if len(req.Objects) == 0 || len(req.Objects) > maxDeleteKeys {
		return errMalformedXML
	}
	res := deleteResult{NS: s3NS}
	var keys []string
	for _, o := range req.Objects {
		switch {
		case o.Key == "":
			res.Errors = append(res.Errors, deleteErrorEntry{Key: o.Key, Code: "InvalidArgument", Message: "Object key must not be empty."})
		case checkKey(o.Key) != nil:
			ae, _ := toAPIError(checkKey(o.Key))
			res.Errors = append(res.Errors, deleteErrorEntry{Key: o.Key, Code: ae.Code, Message: ae.Message})
		default:
			keys = append(keys, o.Key)
		}
	}
	if len(keys) > 0 {
		failed, err := s.cl.DeleteMany(r.Context(), rq.bucket, keys)
		if err != nil {
			return err
		}
		for _, k := range keys {
			if ferr, bad := failed[k]; bad && !errors.Is(ferr, store.ErrNoSuchKey) {
				ae, _ := toAPIError(ferr)
				res.Errors = append(res.Errors, deleteErrorEntry{Key: k, Code: ae.Code, Message: ae.Message})
			} else if !req.Quiet {
				res.Deleted = append(res.Deleted, deletedEntry{Key: k})
			}
		}
	}
	return writeXML(w, r, res)
}

// hasDigest reports whether a request carries a digest of its body the
// store can check: Content-MD5 or an x-amz-checksum-* header or trailer.
func hasDigest(h http.Header) bool {
	if h.Get("Content-MD5") != "" || h.Get("x-amz-trailer") != "" || h.Get("x-amz-sdk-checksum-algorithm") != "" {
		return true
	}
	for name := range h {
		if _, err := checksum.ParseHeaderName(name); err == nil {
			return true
		}
	}
	return false
}
