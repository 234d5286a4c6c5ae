package memstore

// Multipart uploads, kept in memory as the objects are.

import (
	"context"
	"crypto/md5"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"

	"github.com/hoard-io/hoard/internal/checksum"
	"github.com/hoard-io/hoard/internal/store"
)

// CreateMultipartUpload implements store.Store.
func (s *Store) CreateMultipartUpload(ctx context.Context, bucketName, key string, opts store.PutOptions) (string, error) {
	if err := s.begin(ctx, "create_multipart", bucketName, key); err != nil {
		return "", err
	}
	u := &upload{bucket: bucketName, key: key, opts: opts, parts: make(map[int]*part)}
	u.opts.UserMetadata = maps.Clone(opts.UserMetadata)
	if opts.ChecksumAlgorithm != "" {
		a, err := checksum.ParseAlgorithm(opts.ChecksumAlgorithm)
		if err != nil {
			return "", wrap("create_multipart", bucketName, key, apiError("InvalidRequest", http.StatusBadRequest, "%v", err))
		}
		u.algo = a
	}
	id := make([]byte, 16)
	_, _ = rand.Read(id)
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := s.bucketLocked(bucketName); err != nil {
		return "", wrap("create_multipart", bucketName, key, err)
	}
	s.uploads[hex.EncodeToString(id)] = u
	return hex.EncodeToString(id), nil
}

// uploadLocked finds an upload of bucket/key. Called with mu held.
func (s *Store) uploadLocked(bucketName, key, id string) (*upload, error) {
	u := s.uploads[id]
	if u == nil || u.bucket != bucketName || u.key != key {
		if _, err := s.bucketLocked(bucketName); err != nil {
			return nil, err
		}
		return nil, store.ErrNoSuchUpload
	}
	return u, nil
}

// UploadPart implements store.Store. A part with no checksum of its own is
// checksummed with the upload's algorithm, if it has one.
func (s *Store) UploadPart(ctx context.Context, bucketName, key, uploadID string, partNumber int, r io.Reader, size int64, opts store.PutOptions) (store.Part, error) {
	if err := s.begin(ctx, "upload_part", bucketName, key); err != nil {
		return store.Part{}, err
	}
	fail := func(err error) (store.Part, error) {
		return store.Part{}, wrap("upload_part", bucketName, key, fmt.Errorf("part %d: %w", partNumber, err))
	}
	if partNumber < 1 || partNumber > maxPartNumber {
		return fail(apiError("InvalidArgument", http.StatusBadRequest, "Part number must be an integer between 1 and %d, inclusive", maxPartNumber))
	}
	s.mu.Lock()
	u, err := s.uploadLocked(bucketName, key, uploadID)
	s.mu.Unlock()
	if err != nil {
		return fail(err)
	}
	data, md5sum, sum, algo, err := readBody(r, size, opts, u.algo)
	if err != nil {
		return fail(err)
	}
	if u.algo != "" && algo != u.algo {
		return fail(apiError("InvalidRequest", http.StatusBadRequest, "part checksum %s differs from the upload's %s", algo, u.algo))
	}
	p := &part{
		Part: store.Part{PartNumber: partNumber, ETag: hex.EncodeToString(md5sum), Size: int64(len(data)), LastModified: now()},
		data: data, md5: md5sum, sum: sum,
	}
	if algo != "" {
		p.Checksums = map[string]string{string(algo): checksum.Encode(sum)}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.uploads[uploadID] != u {
		return fail(store.ErrNoSuchUpload) // completed or aborted meanwhile
	}
	u.parts[partNumber] = p
	return p.out(), nil
}

// out returns the part's description for a caller.
func (p *part) out() store.Part {
	o := p.Part
	o.Checksums = maps.Clone(p.Checksums)
	return o
}

// CompleteMultipartUpload implements store.Store. The object's ETag is S3's:
// the MD5 of the parts' MD5s, then "-" and the number of parts.
func (s *Store) CompleteMultipartUpload(ctx context.Context, bucketName, key, uploadID string, parts []store.Part, opts store.CompleteOptions) (store.PutResult, error) {
	if err := s.begin(ctx, "complete_multipart", bucketName, key); err != nil {
		return store.PutResult{}, err
	}
	fail := func(err error) (store.PutResult, error) {
		return store.PutResult{}, wrap("complete_multipart", bucketName, key, err)
	}
	if len(parts) == 0 {
		return fail(apiError("MalformedXML", http.StatusBadRequest, "You must specify at least one part"))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	u, err := s.uploadLocked(bucketName, key, uploadID)
	if err != nil {
		return fail(err)
	}
	b, err := s.bucketLocked(bucketName)
	if err != nil {
		return fail(err)
	}
	chosen := make([]*part, len(parts))
	for i, want := range parts {
		if i > 0 && want.PartNumber <= parts[i-1].PartNumber {
			return fail(apiError("InvalidPartOrder", http.StatusBadRequest, "The list of parts was not in ascending order."))
		}
		p := u.parts[want.PartNumber]
		if p == nil || strings.Trim(want.ETag, `"`) != p.ETag {
			return fail(apiError("InvalidPart", http.StatusBadRequest, "Part %d could not be found or its ETag does not match.", want.PartNumber))
		}
		chosen[i] = p
	}
	var size int64
	for i, p := range chosen {
		if i < len(chosen)-1 && p.Size < MinPartSize {
			return fail(apiError("EntityTooSmall", http.StatusBadRequest,
				"Part %d is %d bytes; every part but the last must be at least %d.", p.PartNumber, p.Size, MinPartSize))
		}
		size += p.Size
	}
	data := make([]byte, 0, size)
	etags := md5.New()
	for _, p := range chosen {
		data = append(data, p.data...)
		etags.Write(p.md5)
	}
	info := infoFromPut(bucketName, key, u.opts)
	info.ETag = fmt.Sprintf("%s-%d", hex.EncodeToString(etags.Sum(nil)), len(chosen))
	if u.algo != "" {
		info.Checksums = map[string]string{string(u.algo): multipartChecksum(u.algo, chosen, data)}
		info.ChecksumType = "COMPOSITE"
		if u.algo == checksum.CRC64NVME {
			info.ChecksumType = "FULL_OBJECT" // S3 has no composite CRC64NVME
		}
	}
	if err := checkWrite(b, key, opts.IfMatch, opts.IfNoneMatch); err != nil {
		return fail(err)
	}
	info.Size = size
	info.LastModified = now()
	b.objects[key] = &object{data: data, info: info}
	delete(s.uploads, uploadID)
	return store.PutResult{ETag: info.ETag, Checksums: maps.Clone(info.Checksums)}, nil
}

// multipartChecksum is the whole object's checksum S3 reports for a
// multipart upload: the checksum of the parts' checksums with "-N" for the
// composite algorithms, a plain full-object value for CRC64NVME.
func multipartChecksum(a checksum.Algorithm, parts []*part, data []byte) string {
	if a == checksum.CRC64NVME {
		return checksum.Sum(a, data)
	}
	h := checksum.New(a)
	for _, p := range parts {
		if p.sum != nil {
			h.Write(p.sum)
		} else {
			h.Write(checksum.New(a).Sum(nil)) // unreachable: parts take the upload's algorithm
		}
	}
	return fmt.Sprintf("%s-%d", checksum.Encode(h.Sum(nil)), len(parts))
}

// AbortMultipartUpload implements store.Store.
func (s *Store) AbortMultipartUpload(ctx context.Context, bucketName, key, uploadID string) error {
	if err := s.begin(ctx, "abort_multipart", bucketName, key); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := s.uploadLocked(bucketName, key, uploadID); err != nil {
		return wrap("abort_multipart", bucketName, key, err)
	}
	delete(s.uploads, uploadID)
	return nil
}

// ListParts implements store.Store. maxParts <= 0 means S3's 1000.
func (s *Store) ListParts(ctx context.Context, bucketName, key, uploadID string, partNumberMarker, maxParts int) (store.ListPartsResult, error) {
	if err := s.begin(ctx, "list_parts", bucketName, key); err != nil {
		return store.ListPartsResult{}, err
	}
	if maxParts <= 0 {
		maxParts = defaultMaxKeys
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	u, err := s.uploadLocked(bucketName, key, uploadID)
	if err != nil {
		return store.ListPartsResult{}, wrap("list_parts", bucketName, key, err)
	}
	nums := slices.Sorted(maps.Keys(u.parts))
	res := store.ListPartsResult{ChecksumAlgorithm: string(u.algo)}
	for _, n := range nums {
		if n <= partNumberMarker {
			continue
		}
		if len(res.Parts) == maxParts {
			res.IsTruncated = true
			break
		}
		res.Parts = append(res.Parts, u.parts[n].out())
		res.NextPartNumberMarker = n
	}
	return res, nil
}
