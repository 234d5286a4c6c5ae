package s3auth

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// The shortcuts answer what the general code answers, for queries and
// dates of every shape, canonical or not.

func TestAppendCanonicalQueryMatchesCanonical(t *testing.T) {
	raws := []string{
		"", "acl", "acl=", "b=2&a=1&a=0", "a=0&a=1&b=2", "prefix=a+b", "k=%7E%2a", "k=%7E", "k=%2A",
		"X-Amz-Signature=abc&z=1", "Z=1&a=1", "a=1&Z=1", "k=caf%C3%A9", "k=caf%c3%a9", "a=1&&b=2", "a=1&",
		"a=%2", "a=%", "a=%G0", "a=1&a=1", "a=2&a=1", "a=b=c", "a=%3D", "a/b=1", "k=%2F",
		"X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AK%2F20260101%2Fus-east-1%2Fs3%2Faws4_request" +
			"&X-Amz-Date=20260101T000000Z&X-Amz-Expires=3600&X-Amz-Signature=00ff&X-Amz-SignedHeaders=host",
		"X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AK/20260101/us-east-1/s3/aws4_request" +
			"&X-Amz-Date=20260101T000000Z&X-Amz-Expires=3600&X-Amz-SignedHeaders=host&X-Amz-Signature=00ff",
		"X-Amz-Signature=1&X-Amz-Signature=2", "x-id=GetObject&partNumber=1",
	}
	alphabet := []string{"a", "b", "Z", "=", "&", "%", "%2F", "%41", "%c3", "+", "~", "-", "X-Amz-Signature", "1", "/"}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 5000 {
		var b strings.Builder
		for range rng.IntN(12) {
			b.WriteString(alphabet[rng.IntN(len(alphabet))])
		}
		raws = append(raws, b.String())
	}
	for _, raw := range raws {
		q := parseQuery(raw)
		for _, presigned := range []bool{false, true} {
			want := q.canonical(presigned)
			if got := string(appendCanonicalQuery([]byte("x"), raw, q, presigned)); got != "x"+want {
				t.Fatalf("appendCanonicalQuery(%q, presigned %v) = %q, want %q", raw, presigned, got[1:], want)
			}
		}
	}
}

func TestUnescapeQueryMatchesSlow(t *testing.T) {
	for _, s := range []string{"", "a", "a+b", "a%20b", "%", "%zz", "AK%2F2026", "caf%C3%A9", "~-._"} {
		if got, want := unescapeQuery(s), unescapeQuerySlow(s); got != want {
			t.Errorf("unescapeQuery(%q) = %q, want %q", s, got, want)
		}
	}
}

func TestParseBasicTimeMatchesTimeParse(t *testing.T) {
	ins := []string{
		"20260101T000000Z", "20261231T235959Z", "20240229T120000Z", "20230229T120000Z", "20260431T000000Z",
		"20260100T000000Z", "20261301T000000Z", "20260001T000000Z", "20260101T240000Z", "20260101T006000Z",
		"20260101T000060Z", "20260101 000000Z", "20260101T000000z", "2026010T000000Z", "20260101T000000.5Z",
		"2026-1-1T000000Z", "+0260101T000000Z", "00000101T000000Z", "99991231T235959Z", "",
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for range 5000 {
		ins = append(ins, time.Unix(rng.Int64N(1<<35), 0).UTC().Format(iso8601Basic))
	}
	for _, s := range ins {
		for _, dateOnly := range []bool{false, true} {
			in, layout := s, iso8601Basic
			if dateOnly {
				in, layout = s[:min(len(s), 8)], scopeDateLayout
			}
			got, gerr := parseBasicTime(in, dateOnly)
			want, werr := time.Parse(layout, in)
			if (gerr == nil) != (werr == nil) || !got.Equal(want) || got.Location() != want.Location() {
				t.Fatalf("parseBasicTime(%q, %v) = %v, %v; time.Parse: %v, %v", in, dateOnly, got, gerr, want, werr)
			}
		}
	}
}
