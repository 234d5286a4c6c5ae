package s3api

import (
	"context"
	"errors"
	"io"
	"net/http"

	"github.com/hoard-io/hoard/internal/cachelet"
	"github.com/hoard-io/hoard/internal/checksum"
	"github.com/hoard-io/hoard/internal/s3auth"
	"github.com/hoard-io/hoard/internal/store"
)

// APIError is an S3 error as the client sees it.
type APIError struct {
	Code    string
	Message string
	Status  int
}

func (e *APIError) Error() string { return e.Code + ": " + e.Message }

func apiErr(code string, status int, msg string) *APIError {
	return &APIError{Code: code, Message: msg, Status: status}
}

// Errors raised by the HTTP layer itself.
var (
	errInvalidBucketName = apiErr("InvalidBucketName", http.StatusBadRequest, "The specified bucket is not valid.")
	errKeyTooLong        = apiErr("KeyTooLongError", http.StatusBadRequest, "Your key is too long.")
	errInvalidKey        = apiErr("InvalidArgument", http.StatusBadRequest, "Object key contains a character or path segment that is not allowed.")
	errMalformedXML      = apiErr("MalformedXML", http.StatusBadRequest, "The XML you provided was not well-formed or did not validate against our published schema.")
	errInvalidArgument   = apiErr("InvalidArgument", http.StatusBadRequest, "Invalid argument.")
	errInvalidRange      = apiErr("InvalidRange", http.StatusRequestedRangeNotSatisfiable, "The requested range is not satisfiable.")
	errMissingLength     = apiErr("MissingContentLength", http.StatusLengthRequired, "You must provide the Content-Length HTTP header.")
	errEntityTooLarge    = apiErr("EntityTooLarge", http.StatusBadRequest, "Your proposed upload exceeds the maximum allowed object size.")
	errMetadataTooLarge  = apiErr("MetadataTooLarge", http.StatusBadRequest, "Your metadata headers exceed the maximum allowed metadata size.")
	errPrecondition      = apiErr("PreconditionFailed", http.StatusPreconditionFailed, "At least one of the pre-conditions you specified did not hold.")
	errInvalidPart       = apiErr("InvalidPart", http.StatusBadRequest, "One or more of the specified parts could not be found.")
	errInvalidPartOrder  = apiErr("InvalidPartOrder", http.StatusBadRequest, "The list of parts was not in ascending order.")
	errInvalidCopySource = apiErr("InvalidArgument", http.StatusBadRequest, "Copy Source must mention the source bucket and key: sourcebucket/sourcekey.")
	errInternal          = apiErr("InternalError", http.StatusInternalServerError, "We encountered an internal error. Please try again.")
	errUnavailable       = apiErr("ServiceUnavailable", http.StatusServiceUnavailable, "The object store behind the cache is unavailable. Please try again.")
	errHeaderTooLarge    = apiErr("RequestHeaderSectionTooLarge", http.StatusBadRequest, "Your request header section exceeds the maximum allowed size.")
)

// table maps every sentinel the layers below return to the S3 error the
// client gets. It is the one place where that mapping lives.
var table = []struct {
	err error
	api *APIError
}{
	// Store.
	{store.ErrNoSuchKey, apiErr("NoSuchKey", http.StatusNotFound, "The specified key does not exist.")},
	{store.ErrNoSuchBucket, apiErr("NoSuchBucket", http.StatusNotFound, "The specified bucket does not exist.")},
	{store.ErrPreconditionFailed, errPrecondition},
	{store.ErrInvalidRange, errInvalidRange},
	{store.ErrBucketNotEmpty, apiErr("BucketNotEmpty", http.StatusConflict, "The bucket you tried to delete is not empty.")},
	{store.ErrBucketExists, apiErr("BucketAlreadyOwnedByYou", http.StatusConflict, "Your previous request to create the named bucket succeeded and you already own it.")},
	{store.ErrNoSuchUpload, apiErr("NoSuchUpload", http.StatusNotFound, "The specified multipart upload does not exist.")},
	{store.ErrUnavailable, errUnavailable},

	// Unpacked reads (x-hoard-unpacked).
	{cachelet.ErrNotPacked, apiErr("InvalidRequest", http.StatusBadRequest, "The object is not in hoard's block format; read it without x-hoard-unpacked.")},
	{cachelet.ErrBlockChecksum, apiErr("InternalError", http.StatusBadGateway, "A block of the object, as the store holds it, does not match its checksum; none of its bytes were served.")},

	// Authentication.
	{s3auth.ErrMissingAuth, apiErr("AccessDenied", http.StatusForbidden, "Access Denied. Anonymous requests are not allowed.")},
	{s3auth.ErrExpired, apiErr("AccessDenied", http.StatusForbidden, "Request has expired")},
	{s3auth.ErrAccessDenied, apiErr("AccessDenied", http.StatusForbidden, "Access Denied.")},
	{s3auth.ErrInvalidAccessKeyID, apiErr("InvalidAccessKeyId", http.StatusForbidden, "The AWS Access Key Id you provided does not exist in our records.")},
	{s3auth.ErrSignatureDoesNotMatch, apiErr("SignatureDoesNotMatch", http.StatusForbidden, "The request signature we calculated does not match the signature you provided. Check your key and signing method.")},
	{s3auth.ErrMissingFields, apiErr("AccessDenied", http.StatusBadRequest, "Access Denied.")},
	{s3auth.ErrAuthHeaderMalformed, apiErr("AuthorizationHeaderMalformed", http.StatusBadRequest, "The authorization header is malformed.")},
	{s3auth.ErrMalformedPresign, apiErr("AuthorizationQueryParametersError", http.StatusBadRequest, "Query-string authentication parameters are malformed.")},
	{s3auth.ErrRequestTimeTooSkewed, apiErr("RequestTimeTooSkewed", http.StatusForbidden, "The difference between the request time and the server's time is too large.")},
	{s3auth.ErrContentSHA256Mismatch, apiErr("XAmzContentSHA256Mismatch", http.StatusBadRequest, "The provided 'x-amz-content-sha256' header does not match what was computed.")},
	{s3auth.ErrInvalidContentSHA256, apiErr("InvalidArgument", http.StatusBadRequest, "x-amz-content-sha256 must be UNSIGNED-PAYLOAD, STREAMING-* or a valid sha256 value.")},
	{s3auth.ErrIncompleteBody, apiErr("IncompleteBody", http.StatusBadRequest, "You did not provide the number of bytes specified by the Content-Length HTTP header.")},
	{s3auth.ErrMalformedChunk, apiErr("InvalidRequest", http.StatusBadRequest, "The aws-chunked body is malformed.")},
	{s3auth.ErrMissingDecodedLength, apiErr("MissingContentLength", http.StatusLengthRequired, "You must provide the x-amz-decoded-content-length header with aws-chunked bodies.")},
	{s3auth.ErrUnsupportedAlgorithm, apiErr("InvalidArgument", http.StatusBadRequest, "The signing or checksum algorithm is not supported.")},

	// Payload checksums.
	{checksum.ErrBadDigest, apiErr("BadDigest", http.StatusBadRequest, "The Content-MD5 you specified did not match what we received.")},
	{checksum.ErrInvalidDigest, apiErr("InvalidDigest", http.StatusBadRequest, "The Content-MD5 you specified is not valid.")},
	{checksum.ErrChecksumMismatch, apiErr("BadDigest", http.StatusBadRequest, "The checksum you specified did not match what we received.")},
	{checksum.ErrInvalidChecksum, apiErr("InvalidRequest", http.StatusBadRequest, "The checksum value you specified is not valid.")},
	{checksum.ErrUnsupportedAlgorithm, apiErr("InvalidRequest", http.StatusBadRequest, "The checksum algorithm is not supported.")},
}

// toAPIError maps any error from the layers below to the S3 error to send,
// and says whether it is the server's fault (to be logged as such).
func toAPIError(err error) (*APIError, bool) {
	var ae *APIError
	if errors.As(err, &ae) {
		return ae, ae.Status >= 500
	}
	var se *store.APIError
	if errors.As(err, &se) {
		// The store is the authority on its own client errors; its 5xx
		// arrive as ErrUnavailable.
		status := se.StatusCode
		if status == 0 {
			status = http.StatusBadRequest
		}
		return &APIError{Code: se.Code, Message: se.Message, Status: status}, status >= 500
	}
	for _, t := range table {
		if errors.Is(err, t.err) {
			return t.api, t.api.Status >= 500
		}
	}
	if errors.Is(err, cachelet.ErrObjectChanged) {
		return apiErr("SlowDown", http.StatusServiceUnavailable, "The object changed while it was read. Please retry."), true
	}
	if errors.Is(err, errBodyTooLong) || errors.Is(err, io.ErrUnexpectedEOF) {
		return apiErr("IncompleteBody", http.StatusBadRequest, "You did not provide the number of bytes specified by the Content-Length HTTP header."), false
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return errUnavailable, true
	}
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return apiErr("MaxMessageLengthExceeded", http.StatusBadRequest, "Your request was too big."), false
	}
	return errInternal, true
}
