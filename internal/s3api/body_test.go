package s3api

import (
	"bytes"
	"errors"
	"io"
	"testing"
	"testing/iotest"
)

// verifying is a body whose verification fails at its end, as s3auth's
// readers do.
type verifying struct {
	r   io.Reader
	err error
}

func (v *verifying) Read(p []byte) (int, error) {
	n, err := v.r.Read(p)
	if err == io.EOF && v.err != nil {
		return n, v.err
	}
	return n, err
}

func TestExactBody(t *testing.T) {
	data := bytes.Repeat([]byte("0123456789"), 1000)
	bad := errors.New("checksum mismatch")
	tests := []struct {
		name    string
		body    io.Reader
		size    int64
		wantErr error
		wantN   int64 // bytes released before the error
	}{
		{"exact", bytes.NewReader(data), int64(len(data)), nil, int64(len(data))},
		{"one byte at a time", iotest.OneByteReader(bytes.NewReader(data)), int64(len(data)), nil, int64(len(data))},
		{"verification fails at end", &verifying{r: bytes.NewReader(data), err: bad}, int64(len(data)), bad, -1},
		{"verification fails, small reads", &verifying{r: iotest.HalfReader(bytes.NewReader(data)), err: bad}, int64(len(data)), bad, -1},
		{"longer than declared", bytes.NewReader(data), int64(len(data)) - 1, errBodyTooLong, -1},
		{"shorter than declared", bytes.NewReader(data), int64(len(data)) + 1, io.ErrUnexpectedEOF, -1},
		{"empty", bytes.NewReader(nil), 0, nil, 0},
		{"empty but fails", &verifying{r: bytes.NewReader(nil), err: bad}, 0, bad, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			n, err := io.Copy(&out, newExactBody(tt.body, tt.size))
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if tt.wantErr == nil && n != tt.wantN {
				t.Fatalf("copied %d bytes, want %d", n, tt.wantN)
			}
			// A failing body never hands over its whole declared length:
			// the store must come up short and commit nothing.
			if tt.wantErr != nil && n >= tt.size && tt.size > 0 {
				t.Fatalf("released %d of %d bytes despite failing", n, tt.size)
			}
		})
	}
}
