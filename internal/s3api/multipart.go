package s3api

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/hoard-io/hoard/internal/notify"
	"github.com/hoard-io/hoard/internal/store"
)

func (s *Server) createMultipartUpload(w http.ResponseWriter, r *http.Request, rq *request) error {
	opts, err := putOptions(r.Header)
	if err != nil {
		return err
	}
	id, err := s.cl.Store().CreateMultipartUpload(r.Context(), rq.bucket, rq.key, opts)
	if err != nil {
		return err
	}
	if opts.ChecksumAlgorithm != "" {
		w.Header().Set("x-amz-checksum-algorithm", opts.ChecksumAlgorithm)
	}
	return writeXML(w, r, initiateMultipartUploadResult{NS: s3NS, Bucket: rq.bucket, Key: rq.key, UploadID: id})
}

func partNumber(v string) (int, error) {
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > maxParts {
		return 0, apiErr("InvalidArgument", http.StatusBadRequest, "Part number must be an integer between 1 and 10000, inclusive.")
	}
	return n, nil
}

func (s *Server) uploadPart(w http.ResponseWriter, r *http.Request, rq *request) error {
	n, err := partNumber(rq.query.Get("partNumber"))
	if err != nil {
		return err
	}
	uploadID := rq.query.Get("uploadId")
	size, err := payloadSize(rq, MaxObjectSize)
	if err != nil {
		return err
	}
	opts, err := putOptions(r.Header)
	if err != nil {
		return err
	}
	body := &errCapture{r: newExactBody(r.Body, size)}
	part, err := s.cl.Store().UploadPart(uploadContext(r), rq.bucket, rq.key, uploadID, n, body, size, opts)
	if err = bodyError(body, err); err != nil {
		return err
	}
	h := w.Header()
	h.Set("ETag", `"`+part.ETag+`"`)
	setResultChecksums(h, part.Checksums)
	w.WriteHeader(http.StatusOK)
	return nil
}

func (s *Server) completeMultipartUpload(w http.ResponseWriter, r *http.Request, rq *request) error {
	var req completeMultipartUpload
	if err := readXML(r, &req); err != nil {
		return err
	}
	if len(req.Parts) == 0 || len(req.Parts) > maxParts {
		return errMalformedXML
	}
	parts := make([]store.Part, 0, len(req.Parts))
	prev := 0
	for _, p := range req.Parts {
		if p.PartNumber < 1 || p.PartNumber > maxParts {
			return errInvalidPart
		}
		if p.PartNumber <= prev {
			return errInvalidPartOrder
		}
		prev = p.PartNumber
		parts = append(parts, store.Part{PartNumber: p.PartNumber, ETag: strings.Trim(p.ETag, `"`), Checksums: p.toMap()})
	}
	cond := store.CompleteOptions{IfMatch: r.Header.Get("If-Match"), IfNoneMatch: r.Header.Get("If-None-Match")}
	res, err := s.cl.CompleteMultipartUpload(r.Context(), rq.bucket, rq.key, rq.query.Get("uploadId"), parts, cond)
	if err != nil {
		return err
	}
	if err := writeXML(w, r, completeMultipartUploadResult{NS: s3NS, Location: "/" + rq.bucket + "/" + rq.key,
		Bucket: rq.bucket, Key: rq.key, ETag: `"` + res.ETag + `"`, checksumFields: checksumFieldsOf(res.Checksums)}); err != nil {
		return err
	}
	s.notifyUnsized(w, r, rq, notify.ObjectCreatedCompleteMultipartUpload, res.ETag)
	return nil
}

func (s *Server) abortMultipartUpload(w http.ResponseWriter, r *http.Request, rq *request) error {
	if err := s.cl.Store().AbortMultipartUpload(r.Context(), rq.bucket, rq.key, rq.query.Get("uploadId")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) listParts(w http.ResponseWriter, r *http.Request, rq *request) error {
	q := rq.query
	maxP, marker := 1000, 0
	if v := q.Get("max-parts"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return apiErr("InvalidArgument", http.StatusBadRequest, "max-parts must be a non-negative integer.")
		}
		maxP = min(n, 1000)
	}
	if v := q.Get("part-number-marker"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return apiErr("InvalidArgument", http.StatusBadRequest, "part-number-marker must be a non-negative integer.")
		}
		marker = n
	}
	uploadID := q.Get("uploadId")
	page, err := s.cl.Store().ListParts(r.Context(), rq.bucket, rq.key, uploadID, marker, maxP)
	if err != nil {
		return err
	}
	res := listPartsResult{NS: s3NS, Bucket: rq.bucket, Key: rq.key, UploadID: uploadID, PartNumberMarker: marker,
		NextPartNumberMarker: page.NextPartNumberMarker, MaxParts: maxP, IsTruncated: page.IsTruncated,
		ChecksumAlgorithm: page.ChecksumAlgorithm}
	for _, p := range page.Parts {
		res.Parts = append(res.Parts, partEntry{PartNumber: p.PartNumber, LastModified: p.LastModified.UTC().Format(timeFormatXML),
			ETag: `"` + p.ETag + `"`, Size: p.Size, checksumFields: checksumFieldsOf(p.Checksums)})
	}
	return writeXML(w, r, res)
}
