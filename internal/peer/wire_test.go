package peer

import (
	"bufio"
	"bytes"
	"net/http"
	"net/textproto"
	"reflect"
	"testing"
	"time"

	"github.com/hoard-io/hoard/internal/store"
)

// Object metadata crosses the wire whole: every field setInfoHeaders
// writes, as sent and parsed by net/http, is what infoFromHeaders reads;
// headers that are none of it are not taken for object headers.
func TestInfoHeadersRoundTrip(t *testing.T) {
	info := store.ObjectInfo{
		Bucket: "b", Key: "k/x", ETag: "abc-2", Size: 12345,
		LastModified: time.Date(2026, 11, 29, 13, 1, 2, 345678000, time.UTC),
		ContentType:  "text/plain", ContentEncoding: "gzip", ContentDisposition: "attachment",
		ContentLanguage: "en", CacheControl: "no-cache", Expires: "Wed, 21 Oct 2037 07:28:00 GMT",
		VersionID: "v1", ChecksumType: "FULL_OBJECT",
		UserMetadata: map[string]string{"color": "blue", "mixed-case": "V"},
		Checksums:    map[string]string{"CRC32C": "AAAAAA==", "SHA256": "x"},
		Headers: map[string]string{
			"x-amz-storage-class": "STANDARD_IA", "x-amz-server-side-encryption": "AES256",
			"x-amz-mp-parts-count": "2",
		},
	}
	h := http.Header{}
	setInfoHeaders(h, info)
	h.Set("X-Amz-Request-Id", "not object metadata")
	h.Set("Server", "hoard")
	var wire bytes.Buffer
	if err := h.Write(&wire); err != nil {
		t.Fatal(err)
	}
	wire.WriteString("\r\n")
	got, err := textproto.NewReader(bufio.NewReader(&wire)).ReadMIMEHeader()
	if err != nil {
		t.Fatal(err)
	}
	back, err := infoFromHeaders("b", "k/x", http.Header(got))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, info) {
		t.Fatalf("read back\n%+v\nwant\n%+v", back, info)
	}
}
