package s3auth

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/minio/minio-go/v7/pkg/signer"

	"github.com/hoard-io/hoard/internal/checksum"
	"github.com/hoard-io/hoard/internal/clock"
)

// TestLeaveDigestsToStore: a body whose header checksum or Content-MD5 is
// wrong reads whole once those checks are left to the store; a signed
// payload hash stays checked here.
func TestLeaveDigestsToStore(t *testing.T) {
	v := newTestVerifier(t, clock.Real())
	sign := func(mode string, hdr http.Header) *http.Request {
		req, err := http.NewRequest(http.MethodPut, objectURL("m", ""), strings.NewReader("abc"))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("X-Amz-Content-Sha256", mode)
		for k, vs := range hdr {
			req.Header[k] = vs
		}
		return serverSide(t, signer.SignV4(*req, testAK, testSK, "", testRegion))
	}
	for _, tt := range []struct {
		name string
		mode string
		hdr  http.Header
		want error // once left to the store
	}{
		{"bad md5", unsignedPayload, http.Header{"Content-Md5": {"1B2M2Y8AsgTpgAmY7PhCfg=="}}, nil},
		{"crc32 wrong", unsignedPayload, http.Header{"X-Amz-Checksum-Crc32": {"AAAAAA=="}}, nil},
		{"crc32 right", unsignedPayload, http.Header{"X-Amz-Checksum-Crc32": {checksum.Sum(checksum.CRC32, []byte("abc"))}}, nil},
		{"no digest", unsignedPayload, nil, nil},
		{"payload hash wrong, bad md5", sha256Hex([]byte("abd")), http.Header{"Content-Md5": {"1B2M2Y8AsgTpgAmY7PhCfg=="}}, ErrContentSHA256Mismatch},
	} {
		t.Run(tt.name, func(t *testing.T) {
			req, err := v.Verify(sign(tt.mode, tt.hdr))
			if err != nil {
				t.Fatal(err)
			}
			req.LeaveDigestsToStore()
			defer req.Body.Close()
			got, err := io.ReadAll(req.Body)
			wantErr(t, err, tt.want)
			if tt.want == nil && string(got) != "abc" {
				t.Fatalf("got %q", got)
			}
		})
	}
}
