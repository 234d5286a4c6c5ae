package s3api

import (
	"errors"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"time"
)

// Work every hit repeats, done once where the answer cannot differ.

// httpDates remembers the HTTP-date spelling of recent whole seconds,
// direct-mapped by the second: the objects a cache serves share their
// Last-Modified, and formatting one costs more than the rest of the
// header work of a hit.
var httpDates [64]atomic.Pointer[httpDateEntry]

type httpDateEntry struct {
	unix int64
	s    string
}

// httpDate is t in UTC formatted as http.TimeFormat.
func httpDate(t time.Time) string {
	if t.Nanosecond() != 0 {
		// The format drops the fraction; the second is what is cached.
		t = t.Truncate(time.Second)
	}
	u := t.Unix()
	slot := &httpDates[uint64(u)%uint64(len(httpDates))]
	if e := slot.Load(); e != nil && e.unix == u {
		return e.s
	}
	s := t.UTC().Format(http.TimeFormat)
	slot.Store(&httpDateEntry{unix: u, s: s})
	return s
}

var errSemicolon = errors.New("invalid semicolon separator in query")

// parseQuery is url.ParseQuery (the same values, and an error exactly
// when it returns one), without decoding the parts that hold nothing to
// decode, and with the values' slices cut from one array (each capped at
// its length, so that a repeated key's append copies).
func parseQuery(raw string) (url.Values, error) {
	if raw == "" {
		return url.Values{}, nil
	}
	n := strings.Count(raw, "&") + 1
	m := make(url.Values, n)
	backing := make([]string, 0, n)
	var err error
	for raw != "" {
		var part string
		part, raw, _ = strings.Cut(raw, "&")
		if strings.Contains(part, ";") {
			if err == nil {
				err = errSemicolon
			}
			continue
		}
		if part == "" {
			continue
		}
		k, v, _ := strings.Cut(part, "=")
		k, err1 := queryUnescape(k)
		if err1 != nil {
			if err == nil {
				err = err1
			}
			continue
		}
		v, err1 = queryUnescape(v)
		if err1 != nil {
			if err == nil {
				err = err1
			}
			continue
		}
		if vs, ok := m[k]; ok {
			m[k] = append(vs, v)
			continue
		}
		backing = append(backing, v)
		m[k] = backing[len(backing)-1 : len(backing) : len(backing)]
	}
	return m, err
}

func queryUnescape(s string) (string, error) {
	if strings.IndexByte(s, '%') < 0 && strings.IndexByte(s, '+') < 0 {
		return s, nil
	}
	return url.QueryUnescape(s)
}
