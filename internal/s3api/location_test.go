package s3api

import (
	"bytes"
	"crypto/tls"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/iotest"
)

func TestLocationRewriter(t *testing.T) {
	const base = "http://hoard.example:9000"
	long := strings.Repeat("x", maxLocation)
	for _, tc := range []struct{ name, in, want string }{
		{"the store's URL", `<?xml version="1.0"?><CompleteMultipartUploadResult><Location>http://10.0.0.9:9000/b/k%20y</Location><Bucket>b</Bucket></CompleteMultipartUploadResult>`,
			`<?xml version="1.0"?><CompleteMultipartUploadResult><Location>http://hoard.example:9000/b/k%20y</Location><Bucket>b</Bucket></CompleteMultipartUploadResult>`},
		{"after keep-alive white space", "   \n  <R><Location>https://s3.store/b/k</Location></R>", "   \n  <R><Location>http://hoard.example:9000/b/k</Location></R>"},
		{"a relative location stays", "<R><Location>/b/k</Location></R>", "<R><Location>/b/k</Location></R>"},
		{"no location", "<Error><Code>InternalError</Code></Error>", "<Error><Code>InternalError</Code></Error>"},
		{"one element only", "<Location>http://a/b/1</Location><Location>http://a/b/2</Location>", "<Location>http://hoard.example:9000/b/1</Location><Location>http://a/b/2</Location>"},
		{"too long to hold", "<Location>http://a/" + long + "</Location>", "<Location>http://a/" + long + "</Location>"},
		{"never closed", "<R><Location>http://a/b", "<R><Location>http://a/b"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Every split of the input into reads, one byte at a time and whole.
			for _, r := range []io.Reader{strings.NewReader(tc.in), iotest.OneByteReader(strings.NewReader(tc.in)), iotest.HalfReader(strings.NewReader(tc.in))} {
				got, err := io.ReadAll(&locationRewriter{r: r, base: base})
				if err != nil {
					t.Fatal(err)
				}
				if string(got) != tc.want {
					t.Errorf("got  %.200q (%d bytes)\nwant %.200q (%d bytes)", got, len(got), tc.want, len(tc.want))
				}
			}
		})
	}
	// A read error after the element goes on to the reader.
	r := &locationRewriter{r: iotest.TimeoutReader(bytes.NewReader([]byte("<Location>http://a/b</Location>"))), base: base}
	if _, err := io.ReadAll(r); err == nil {
		t.Error("the store's read error was lost")
	}
}

func TestClientBase(t *testing.T) {
	r := httptest.NewRequest("POST", "http://127.0.0.1:9000/b/k?uploadId=u", nil)
	if got := clientBase(r, "b"); got != "http://127.0.0.1:9000" {
		t.Errorf("path style: %q", got)
	}
	r.TLS = &tls.ConnectionState{}
	if got := clientBase(r, "b"); got != "https://127.0.0.1:9000" {
		t.Errorf("https: %q", got)
	}
	v := httptest.NewRequest("POST", "http://b.s3.example/k?uploadId=u", nil)
	if got := clientBase(v, "b"); got != "" {
		t.Errorf("virtual-host style: %q, want none", got)
	}
}
