package s3auth

import (
	"strings"
	"time"
)

// Shortcuts on the signature's hot path. Each answers exactly what the
// general code it stands in front of answers, or declines and leaves the
// request to that code: a presigned URL as SDKs write it (its query
// already in canonical form, its dates plain digits) is verified without
// decoding, re-encoding and sorting its query or running time.Parse.

// appendCanonicalQuery appends the SigV4 canonical query string of a
// request with raw query raw (parsed: q) to b. When raw is already
// canonical (every pair "k=v", each part made only of unreserved bytes
// and upper-case escapes of reserved ones, the pairs in sorted order),
// it is raw itself less a presigned request's X-Amz-Signature pair;
// otherwise q.canonical renders it.
func appendCanonicalQuery(b []byte, raw string, q query, presigned bool) []byte {
	if raw == "" {
		return b
	}
	start := len(b)
	var prevKey, prevVal string
	first := true
	for rest := raw; ; {
		part, tail, more := strings.Cut(rest, "&")
		k, v, ok := strings.Cut(part, "=")
		if !ok || !canonicalPart(k) || !canonicalPart(v) {
			return append(b[:start], q.canonical(presigned)...)
		}
		if !(presigned && k == "X-Amz-Signature") {
			if !first && (k < prevKey || k == prevKey && v < prevVal) {
				return append(b[:start], q.canonical(presigned)...)
			}
			if !first {
				b = append(b, '&')
			}
			b = append(b, part...)
			prevKey, prevVal, first = k, v, false
		}
		if !more {
			return b
		}
		rest = tail
	}
}

// canonicalPart reports whether s is its own SigV4 encoding: decoded
// (as a query component) and encoded again, it is s.
func canonicalPart(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if unreserved(c) {
			continue
		}
		if c != '%' || i+2 >= len(s) || !upperHex(s[i+1]) || !upperHex(s[i+2]) {
			return false
		}
		if unreserved(unhex(s[i+1])<<4 | unhex(s[i+2])) {
			return false // encoded again, it would be the byte itself
		}
		i += 2
	}
	return true
}

func upperHex(c byte) bool { return '0' <= c && c <= '9' || 'A' <= c && c <= 'F' }

func unhex(c byte) byte {
	if c <= '9' {
		return c - '0'
	}
	return c - 'A' + 10
}

// unescapeQuery decodes form-style ("+" is a space, as S3 reads it) and
// keeps undecodable input verbatim rather than failing the request here;
// the signature comparison decides. A part with nothing to decode is
// returned as it is.
func unescapeQuery(s string) string {
	if strings.IndexByte(s, '%') < 0 && strings.IndexByte(s, '+') < 0 {
		return s
	}
	return unescapeQuerySlow(s)
}

// parseBasicTime parses layout iso8601Basic ("20060102T150405Z") or, with
// dateOnly, scopeDateLayout ("20060102"): what time.Parse makes of it,
// falling back to time.Parse for anything but plain digits in range.
func parseBasicTime(s string, dateOnly bool) (time.Time, error) {
	layout := iso8601Basic
	if dateOnly {
		layout = scopeDateLayout
	}
	if len(s) == len(layout) && (dateOnly || s[8] == 'T' && s[15] == 'Z') {
		num := func(i, n int) (int, bool) {
			v := 0
			for _, c := range []byte(s[i : i+n]) {
				if c < '0' || c > '9' {
					return 0, false
				}
				v = v*10 + int(c-'0')
			}
			return v, true
		}
		y, ok1 := num(0, 4)
		mo, ok2 := num(4, 2)
		d, ok3 := num(6, 2)
		h, mi, sec, ok4, ok5, ok6 := 0, 0, 0, true, true, true
		if !dateOnly {
			h, ok4 = num(9, 2)
			mi, ok5 = num(11, 2)
			sec, ok6 = num(13, 2)
		}
		if ok1 && ok2 && ok3 && ok4 && ok5 && ok6 && mo >= 1 && mo <= 12 && d >= 1 && h < 24 && mi < 60 && sec < 60 {
			t := time.Date(y, time.Month(mo), d, h, mi, sec, 0, time.UTC)
			if t.Day() == d { // not a day past the month's end
				return t, nil
			}
		}
	}
	return time.Parse(layout, s)
}
