package s3auth

import (
	"errors"
	"fmt"
)

// Sentinel errors. Verify and the body it returns wrap exactly one of these
// (or one of package checksum's) with %w; the HTTP layer maps each to the S3
// error code and status named in its comment. Messages never carry secrets or
// computed signatures, only what the client itself sent.
//
// A few finer-grained sentinels wrap a broader one with the same S3 code
// (ErrMissingDate is an ErrAccessDenied), so an error table that lists only
// the broad ones still answers correctly.
var (
	// ErrInvalidConfig means New was given an unusable Config. It never
	// reaches a client.
	ErrInvalidConfig = errors.New("s3auth: invalid configuration")

	// ErrAccessDenied is a generic refusal: unsigned x-amz-* headers, a
	// presigned URL that is not yet valid. S3: AccessDenied, 403.
	ErrAccessDenied = errors.New("s3auth: access denied")

	// ErrMissingAuth means the request carries no credentials at all; hoard
	// serves no anonymous requests. S3: AccessDenied, 403.
	ErrMissingAuth = errors.New("s3auth: request is not signed")

	// ErrExpired means a presigned URL's lifetime has passed.
	// S3: AccessDenied, 403, message "Request has expired".
	ErrExpired = errors.New("s3auth: request has expired")

	// ErrInvalidAccessKeyID means the access key is unknown.
	// S3: InvalidAccessKeyId, 403.
	ErrInvalidAccessKeyID = errors.New("s3auth: access key id does not exist")

	// ErrSignatureDoesNotMatch means the signature, a chunk signature or the
	// trailer signature is wrong. S3: SignatureDoesNotMatch, 403.
	ErrSignatureDoesNotMatch = errors.New("s3auth: signature does not match")

	// ErrAuthHeaderMalformed means the Authorization header cannot be parsed
	// or names the wrong region, service or date.
	// S3: AuthorizationHeaderMalformed, 400.
	ErrAuthHeaderMalformed = errors.New("s3auth: authorization header is malformed")

	// ErrMissingFields means the SigV4 Authorization header's components
	// cannot be read: one without "=", an unknown or repeated one, or
	// one of Credential, SignedHeaders and Signature missing. MinIO:
	// AccessDenied, 400 (S3 says AuthorizationHeaderMalformed).
	ErrMissingFields = errors.New("s3auth: authorization header lacks its fields")

	// ErrMalformedPresign means the query-string authentication parameters
	// are missing, unparsable or out of range (X-Amz-Expires over a week).
	// S3: AuthorizationQueryParametersError, 400.
	ErrMalformedPresign = errors.New("s3auth: presigned url parameters are malformed")

	// ErrAmbiguousAuth means both an Authorization header and query-string
	// authentication were sent. S3: InvalidArgument, 400 ("Only one auth
	// mechanism allowed"). It is an ErrUnsupportedAlgorithm.
	ErrAmbiguousAuth = fmt.Errorf("%w: more than one authentication mechanism", ErrUnsupportedAlgorithm)

	// ErrRequestTimeTooSkewed means the signed date is too far from the
	// server's clock. S3: RequestTimeTooSkewed, 403.
	ErrRequestTimeTooSkewed = errors.New("s3auth: request time too skewed")

	// ErrMissingDate means a header-signed request has neither X-Amz-Date
	// nor Date, or one that cannot be parsed. S3: AccessDenied, 403
	// ("AWS authentication requires a valid Date or x-amz-date header").
	// It is an ErrAccessDenied.
	ErrMissingDate = fmt.Errorf("%w: request has no valid date", ErrAccessDenied)

	// ErrContentSHA256Mismatch means the body's SHA-256 differs from the
	// signed x-amz-content-sha256. S3: XAmzContentSHA256Mismatch, 400.
	ErrContentSHA256Mismatch = errors.New("s3auth: body does not match x-amz-content-sha256")

	// ErrInvalidContentSHA256 means x-amz-content-sha256 is neither a hex
	// SHA-256 nor a payload mode S3 defines. S3: InvalidArgument, 400.
	ErrInvalidContentSHA256 = errors.New("s3auth: x-amz-content-sha256 is invalid")

	// ErrMissingContentSHA256 means a SigV4 header-signed request lacks
	// x-amz-content-sha256, which S3 requires. S3: InvalidRequest, 400
	// ("Missing required header for this request: x-amz-content-sha256").
	// It is an ErrInvalidContentSHA256 (InvalidArgument) for tables that do
	// not list it.
	ErrMissingContentSHA256 = fmt.Errorf("%w: header is missing", ErrInvalidContentSHA256)

	// ErrIncompleteBody means an aws-chunked body decoded to a length other
	// than x-amz-decoded-content-length, or ended early.
	// S3: IncompleteBody, 400.
	ErrIncompleteBody = errors.New("s3auth: body length differs from the declared length")

	// ErrMalformedChunk means the aws-chunked framing or its trailer section
	// is broken (bad size line, missing CRLF, oversized chunk, unexpected
	// trailer). S3: InvalidRequest, 400 (AWS says "IncompleteBody" for some
	// truncations; those are ErrIncompleteBody here).
	ErrMalformedChunk = errors.New("s3auth: malformed aws-chunked body")

	// ErrInvalidTrailer means x-amz-trailer names something other than
	// checksum headers, or is used without a trailer payload mode.
	// S3: InvalidRequest, 400. It is an ErrMalformedChunk.
	ErrInvalidTrailer = fmt.Errorf("%w: invalid x-amz-trailer", ErrMalformedChunk)

	// ErrMissingDecodedLength means an aws-chunked request lacks a valid
	// x-amz-decoded-content-length. S3: MissingContentLength, 411.
	ErrMissingDecodedLength = errors.New("s3auth: x-amz-decoded-content-length is missing")

	// ErrUnsupportedAlgorithm means the request uses a signing algorithm
	// hoard does not implement, such as SigV4A (AWS4-ECDSA-P256-SHA256) or
	// an unknown Authorization scheme. S3: InvalidArgument, 400
	// ("Unsupported Authorization Type").
	ErrUnsupportedAlgorithm = errors.New("s3auth: unsupported signing algorithm")
)
