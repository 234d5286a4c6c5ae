package s3api

import (
	"context"
	"errors"
	"io"
	"net/http"
)

// errBodyTooLong: the client sent more bytes than it declared.
var errBodyTooLong = errors.New("request body is longer than its declared length")

// exactBody hands the store exactly size bytes of a verified request body,
// and holds the last of them back until the body has been read to its end.
//
// The store client stops reading once it has the declared length, but the
// verification of a body (its signed SHA-256, Content-MD5, checksum
// headers, the last chunk signature and the trailer) completes only at the
// body's end. So before the final bytes are released, exactBody reads on to
// that end: if verification fails there, the final bytes are withheld and
// the error returned instead, and the store, short of its declared length,
// commits nothing.
type exactBody struct {
	r         io.Reader
	remaining int64
	err       error // sticky
}

func newExactBody(r io.Reader, size int64) *exactBody {
	return &exactBody{r: r, remaining: size}
}

func (b *exactBody) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	if b.remaining == 0 {
		if err := b.finish(); err != nil {
			b.err = err
			return 0, err
		}
		b.err = io.EOF
		return 0, io.EOF
	}
	if int64(len(p)) > b.remaining {
		p = p[:b.remaining]
	}
	n, err := b.r.Read(p)
	b.remaining -= int64(n)
	if err == io.EOF {
		if b.remaining > 0 {
			err = io.ErrUnexpectedEOF
		} else {
			err = nil
		}
	}
	if err != nil {
		b.err = err
		return 0, err // withhold: a body that fails is not passed on in part
	}
	if b.remaining == 0 {
		if ferr := b.finish(); ferr != nil {
			b.err = ferr
			return 0, ferr
		}
	}
	return n, nil
}

// finish reads past the declared end: it must find EOF, having verified
// everything; anything else is the verification's error or extra bytes.
func (b *exactBody) finish() error {
	var one [1]byte
	for {
		n, err := b.r.Read(one[:])
		if n > 0 {
			return errBodyTooLong
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// uploadContext is the context for storing body: the request's values,
// without its cancellation. The HTTP server cancels a request's context
// when the connection reads EOF, which a client that half-closes its side
// after a complete body causes while its upload is being stored; that
// upload is whole and valid, and is stored and answered. A client that
// goes away before its body is complete still aborts the upload: the
// body's next read fails, and a stalled one fails at its deadline
// (timedBody), so the store commits nothing.
func uploadContext(r *http.Request) context.Context {
	return context.WithoutCancel(r.Context())
}
