package s3api

import (
	"bytes"
	"io"
	"net/http"
	"strings"
)

// maxLocation bounds the <Location> element a completion answer may hold
// while it is rewritten; a longer one goes on as the store wrote it.
const maxLocation = 8 << 10

// clientBase is the scheme and host the client addressed this cachelet
// by, for URLs in answers ("http://127.0.0.1:9000"), or "" when the
// request named its bucket in the host (virtual-host style), where a
// path-style URL on that host would name another object.
func clientBase(r *http.Request, bucket string) string {
	if r.Host == "" || !strings.HasPrefix(r.URL.EscapedPath(), "/"+bucket) {
		return ""
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host
}

// locationRewriter relays a CompleteMultipartUpload answer, replacing the
// scheme and host of its <Location> (the store's own address) with the
// client's base, so the URL names the object where the client reached it
// and the store's address stays private. Everything else, the store's
// keep-alive white space included, passes as it comes.
type locationRewriter struct {
	r    io.Reader
	base string
	held []byte // from "<Location>" on, until its end is seen
	out  []byte // ready to be read
	done bool   // the element was handled: pass the rest
	err  error
}

var (
	locOpen  = []byte("<Location>")
	locClose = []byte("</Location>")
)

func (l *locationRewriter) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	for len(l.out) == 0 {
		if l.err != nil {
			if len(l.held) > 0 { // never closed: as it came
				l.out, l.held = l.held, nil
				break
			}
			return 0, l.err
		}
		buf := make([]byte, len(p))
		n, err := l.r.Read(buf)
		l.err = err
		l.feed(buf[:n])
	}
	n := copy(p, l.out)
	l.out = l.out[n:]
	return n, nil
}

// feed takes bytes from the store into out, holding the element once
// its start is seen.
func (l *locationRewriter) feed(b []byte) {
	if l.done {
		l.out = append(l.out, b...)
		return
	}
	l.held = append(l.held, b...)
	i := bytes.Index(l.held, locOpen)
	if i < 0 {
		// Keep what could be the start of "<Location>".
		keep := min(len(l.held), len(locOpen)-1)
		l.out = append(l.out, l.held[:len(l.held)-keep]...)
		l.held = append(l.held[:0:0], l.held[len(l.held)-keep:]...)
		return
	}
	j := bytes.Index(l.held[i:], locClose)
	if j < 0 {
		if len(l.held)-i > maxLocation {
			l.out, l.held, l.done = append(l.out, l.held...), nil, true
		}
		return
	}
	if j-len(locOpen) > maxLocation {
		l.out, l.held, l.done = append(l.out, l.held...), nil, true
		return
	}
	value := string(l.held[i+len(locOpen) : i+j])
	if k := strings.Index(value, "://"); k > 0 {
		if rest := strings.IndexByte(value[k+3:], '/'); rest >= 0 {
			value = l.base + value[k+3+rest:]
		}
	}
	l.out = append(l.out, l.held[:i+len(locOpen)]...)
	l.out = append(l.out, value...)
	l.out = append(l.out, l.held[i+j:]...)
	l.held, l.done = nil, true
}
