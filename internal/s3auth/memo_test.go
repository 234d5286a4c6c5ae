package s3auth

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsv4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/minio/minio-go/v7/pkg/signer"

	"github.com/hoard-io/hoard/internal/clock"
)

// memoCreds is a credential table that can change under a verifier.
type memoCreds struct {
	mu sync.Mutex
	m  map[string]string
}

func (c *memoCreds) Secret(ak string) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	sk, ok := c.m[ak]
	return sk, ok
}

func (c *memoCreds) set(ak, sk string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if sk == "" {
		delete(c.m, ak)
		return
	}
	c.m[ak] = sk
}

func newMemoVerifier(t testing.TB, c clock.Clock, creds CredentialStore, entries int) *Verifier {
	t.Helper()
	v, err := New(Config{Region: testRegion, Clock: c, MemoEntries: entries}, creds)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

var memoSigner = awsv4.NewSigner(func(o *awsv4.SignerOptions) { o.DisableURIPathEscaping = true })

// presignedGet is a presigned GET of key (the AWS SDK's signer), valid
// for ttl from at, with hdr signed too, as the server sees it.
func presignedGet(t testing.TB, key, rq string, at time.Time, ttl time.Duration, hdr http.Header) *http.Request {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, objectURL(key, rq), nil)
	if err != nil {
		t.Fatal(err)
	}
	q := req.URL.Query()
	q.Set("X-Amz-Expires", strconv.FormatInt(int64(ttl/time.Second), 10))
	req.URL.RawQuery = q.Encode()
	for k, vs := range hdr {
		req.Header[k] = vs
	}
	u, signedHdr, err := memoSigner.PresignHTTP(context.Background(), aws.Credentials{AccessKeyID: testAK, SecretAccessKey: testSK},
		req, unsignedPayload, "s3", testRegion, at)
	if err != nil {
		t.Fatal(err)
	}
	out, err := http.NewRequest(http.MethodGet, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, vs := range signedHdr {
		if !strings.EqualFold(k, "host") {
			out.Header[k] = vs
		}
	}
	return serverSide(t, out)
}

// memoHeaderSigned is a method request of key signed in its
// Authorization header at at, with hdr signed too.
func memoHeaderSigned(t testing.TB, method, key, rq string, at time.Time, payload string, hdr http.Header) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, objectURL(key, rq), nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, vs := range hdr {
		req.Header[k] = vs
	}
	req.Header.Set("X-Amz-Content-Sha256", payload)
	if err := memoSigner.SignHTTP(context.Background(), aws.Credentials{AccessKeyID: testAK, SecretAccessKey: testSK},
		req, payload, "s3", testRegion, at); err != nil {
		t.Fatal(err)
	}
	return serverSide(t, req)
}

// memoTemplates are valid requests signed at fuzzTime, in the shapes
// the memo keeps and some it does not.
func memoTemplates(t testing.TB) []*http.Request {
	return []*http.Request{
		presignedGet(t, "k", "", fuzzTime, 10*time.Minute, nil),
		presignedGet(t, "a+b!c/with space", "versionId=3%2F4&x=", fuzzTime, 20*time.Minute,
			http.Header{"Range": {"bytes=0-9"}, "X-Amz-Request-Payer": {"requester"}}),
		memoHeaderSigned(t, http.MethodGet, "k", "", fuzzTime, unsignedPayload, nil),
		memoHeaderSigned(t, http.MethodGet, "ünï/ключ", "list-type=2&prefix=a%2Bb", fuzzTime, sha256Hex(nil),
			http.Header{"Range": {"bytes=1-2"}, "X-Amz-Meta-A": {"one", "two"}}),
		memoHeaderSigned(t, http.MethodHead, "!*'()$,;:@", "", fuzzTime, unsignedPayload, nil),
		memoHeaderSigned(t, http.MethodPut, "put", "", fuzzTime, unsignedPayload, nil), // not kept: a PUT
		sigFirst(presignedGet(t, "!*'()$,;:@", "prefix=a%20b", fuzzTime, 30*time.Minute, nil)),
	}
}

// sigFirst moves a presigned request's X-Amz-Signature to the front of
// its query, where no signer puts it (it signs the same).
func sigFirst(r *http.Request) *http.Request {
	var sig string
	var rest []string
	for part := range strings.SplitSeq(r.URL.RawQuery, "&") {
		if strings.HasPrefix(part, "X-Amz-Signature=") {
			sig = part
		} else {
			rest = append(rest, part)
		}
	}
	r.URL.RawQuery = sig + "&" + strings.Join(rest, "&")
	return r
}

// mutate returns a copy of r with one random change to what a
// signature covers, or to what it does not.
func mutate(rng *rand.Rand, r *http.Request) *http.Request {
	m := r.Clone(context.Background())
	u := *r.URL
	m.URL = &u
	bytesOf := "aZ09%&=+/-_.~ ;,\t"
	flip := func(s string) string {
		if s == "" {
			return string(bytesOf[rng.IntN(len(bytesOf))])
		}
		b := []byte(s)
		i := rng.IntN(len(b))
		switch rng.IntN(4) {
		case 0:
			return string(b[:i]) + string(b[i+1:])
		case 1:
			return string(b[:i]) + string(bytesOf[rng.IntN(len(bytesOf))]) + string(b[i:])
		case 2:
			b[i] ^= 1 << rng.IntN(7)
		default:
			b[i] = bytesOf[rng.IntN(len(bytesOf))]
		}
		return string(b)
	}
	switch rng.IntN(14) {
	case 0:
		m.Method = []string{http.MethodGet, http.MethodHead, http.MethodPut, "get"}[rng.IntN(4)]
	case 1: // the path as sent
		raw := flip(m.URL.EscapedPath())
		if p, err := url.PathUnescape(raw); err == nil {
			m.URL.Path, m.URL.RawPath = p, raw
		}
	case 2: // the decoded path alone
		m.URL.Path, m.URL.RawPath = flip(m.URL.Path), ""
	case 3:
		switch rng.IntN(3) {
		case 0:
			m.URL.RawQuery += "&x=y"
		default:
			m.URL.RawQuery = flip(m.URL.RawQuery)
		}
	case 11: // the path spelled otherwise, the same decoded
		raw := m.URL.EscapedPath()
		i := rng.IntN(len(raw))
		switch {
		case raw[i] == '%' && i+2 < len(raw):
			if c, err := strconv.ParseUint(raw[i+1:i+3], 16, 8); err == nil {
				raw = raw[:i] + string(rune(c)) + raw[i+3:]
			}
		case raw[i] != '/':
			raw = raw[:i] + fmt.Sprintf("%%%02X", raw[i]) + raw[i+1:]
		}
		if p, err := url.PathUnescape(raw); err == nil {
			m.URL.Path, m.URL.RawPath = p, raw
		}
	case 4:
		m.Host = flip(m.Host)
	case 5, 6: // any header's value, signed or not
		names := make([]string, 0, len(m.Header))
		for k := range m.Header {
			names = append(names, k)
		}
		if len(names) == 0 {
			break
		}
		name := names[rng.IntN(len(names))]
		vals := m.Header[name]
		i := rng.IntN(len(vals))
		switch rng.IntN(4) {
		case 0:
			vals[i] = " " + vals[i] + "  " // canonically the same
		case 1:
			m.Header[name] = append(vals, "again")
		default:
			vals[i] = flip(vals[i])
		}
	case 7: // a header added, unsigned
		name := []string{"X-Amz-Meta-Extra", "User-Agent", "Date", "X-Amz-Date", "Range", "X-Amz-Content-Sha256", "Authorization"}[rng.IntN(7)]
		m.Header.Add(name, []string{"x", "Fri, 02 Jan 2026 03:04:05 GMT", "20260102T030405Z", unsignedPayload}[rng.IntN(4)])
	case 8: // the date, a second on
		if d := m.Header.Get("X-Amz-Date"); d != "" {
			m.Header.Set("X-Amz-Date", strings.Replace(d, "05Z", "06Z", 1))
		} else {
			m.URL.RawQuery = strings.Replace(m.URL.RawQuery, "0405Z", "0406Z", 1)
		}
	case 9: // the signature
		flipAt := func(s string, at int) string {
			if at < 0 || at >= len(s) {
				return s
			}
			return s[:at] + flipHex(s[at]) + s[at+1:]
		}
		if a := m.Header.Get("Authorization"); a != "" {
			m.Header.Set("Authorization", flipAt(a, strings.LastIndex(a, "=")+1+rng.IntN(64)))
		} else if i := strings.Index(m.URL.RawQuery, "X-Amz-Signature="); i >= 0 {
			m.URL.RawQuery = flipAt(m.URL.RawQuery, i+len("X-Amz-Signature=")+rng.IntN(64))
		}
	case 12: // the credential or the signed headers' list
		what := []string{testAK, "x-amz-date", "20260102/us-east-1"}[rng.IntN(3)]
		if a := m.Header.Get("Authorization"); a != "" {
			m.Header.Set("Authorization", strings.Replace(a, what, flip(what), 1))
		} else {
			m.URL.RawQuery = strings.Replace(m.URL.RawQuery, what, flip(what), 1)
		}
	case 10: // a body
		m.ContentLength = 1
	default: // the request as it was
	}
	return m
}

// TestMemoDifferential verifies thousands of requests derived from
// valid ones, in random order and each several times, with a memo and
// without, on one clock that moves on past the signatures' validity: the
// verdict, the error and the result must be the same, and the memo must
// have answered many.
func TestMemoDifferential(t *testing.T) {
	clk := clock.NewFake(fuzzTime)
	memoV := newMemoVerifier(t, clk, testCreds(), 0)
	plainV := newMemoVerifier(t, clk, testCreds(), -1)
	rng := rand.New(rand.NewPCG(1, 2))
	templates := memoTemplates(t)
	var reqs []*http.Request
	for range 2500 {
		r := templates[rng.IntN(len(templates))]
		for n := rng.IntN(3); n > 0; n-- {
			r = mutate(rng, r)
		}
		reqs = append(reqs, r, r, r.Clone(context.Background()), r)
	}
	rng.Shuffle(len(reqs), func(i, j int) { reqs[i], reqs[j] = reqs[j], reqs[i] })
	var ok, hits int
	for i, r := range reqs {
		if i > 0 && i%300 == 0 {
			clk.Advance(2*time.Minute + time.Second)
		}
		// The memo's own answer, where it has one, is what a fresh
		// verification establishes, field for field.
		k := getMemoKey()
		if memoV.memo.key(k, r, r.Header.Values("Authorization")) {
			if res := memoV.memo.lookup(memoV, k, r); res != nil {
				hits++
				fresh, err := plainV.verify(r, r.Header.Values("Authorization"))
				if err != nil {
					t.Fatalf("request %d: the memo accepts what verification refuses (%v): %s", i, err, describe(r))
				}
				if !reflect.DeepEqual(res, fresh) {
					t.Fatalf("request %d: memo result %+v, verification's %+v", i, res, fresh)
				}
			}
		}
		putMemoKey(k)
		got, gotErr := memoV.Verify(r)
		want, wantErr := plainV.Verify(r)
		if fmt.Sprint(gotErr) != fmt.Sprint(wantErr) {
			t.Fatalf("request %d: with the memo %v, without %v: %s", i, gotErr, wantErr, describe(r))
		}
		if gotErr != nil {
			continue
		}
		ok++
		if got.AccessKey != want.AccessKey || got.Method != want.Method || got.DecodedLength != want.DecodedLength ||
			got.ContentEncoding != want.ContentEncoding || got.ChecksumAlgorithm != want.ChecksumAlgorithm ||
			got.ChecksumValue != want.ChecksumValue {
			t.Fatalf("request %d: with the memo %+v, without %+v", i, got, want)
		}
		_, gotErr = io.ReadAll(got.Body)
		_, wantErr = io.ReadAll(want.Body)
		if fmt.Sprint(gotErr) != fmt.Sprint(wantErr) {
			t.Fatalf("request %d: body with the memo %v, without %v", i, gotErr, wantErr)
		}
	}
	st := memoV.MemoStats()
	t.Logf("%d requests, %d verified, %d memo hits checked, stats %+v", len(reqs), ok, hits, st)
	if ok < len(reqs)/10 || hits < len(reqs)/20 || st.Hits < uint64(hits) {
		t.Fatalf("too few verified (%d) or memo hits (%d, stats %+v) of %d for the test to mean much", ok, hits, st, len(reqs))
	}
}

func describe(r *http.Request) string {
	return fmt.Sprintf("%s %q (raw %q) ? %q host %q headers %q", r.Method, r.URL.Path, r.URL.RawPath, r.URL.RawQuery, r.Host, r.Header)
}

// TestMemoEligibility checks that only bodiless SigV4 GETs and HEADs
// are kept.
func TestMemoEligibility(t *testing.T) {
	v := newMemoVerifier(t, clock.NewFake(fuzzTime), testCreds(), 0)
	withLength := memoHeaderSigned(t, http.MethodGet, "k", "", fuzzTime, unsignedPayload, nil)
	withLength.ContentLength = 4
	withLength.Body = io.NopCloser(strings.NewReader("body"))
	v2, err := http.NewRequest(http.MethodGet, objectURL("k", ""), nil)
	if err != nil {
		t.Fatal(err)
	}
	v2 = serverSide(t, signer.PreSignV2(*v2, testAK, testSK, int64(time.Hour/time.Second), false))
	for name, r := range map[string]*http.Request{
		"put":    memoHeaderSigned(t, http.MethodPut, "k", "", fuzzTime, unsignedPayload, nil),
		"length": withLength,
		"v2":     v2,
	} {
		for range 2 {
			_, _ = v.Verify(r)
		}
		if st := v.MemoStats(); st != (MemoStats{}) {
			t.Fatalf("%s: %+v, want nothing kept or counted", name, st)
		}
	}
}

// TestMemoTime checks that a hit still honours a presigned URL's window
// and a header-signed request's skew.
func TestMemoTime(t *testing.T) {
	clk := clock.NewFake(fuzzTime)
	v := newMemoVerifier(t, clk, testCreds(), 0)
	pre := presignedGet(t, "k", "", fuzzTime, time.Minute, nil)
	hdr := memoHeaderSigned(t, http.MethodGet, "k", "", fuzzTime, unsignedPayload, nil)
	for i, r := range []*http.Request{pre, hdr, pre, hdr, pre, hdr} {
		if _, err := v.Verify(r); err != nil {
			t.Fatal(err)
		}
		if st := v.MemoStats(); i == 1 && st.Entries != 0 {
			t.Fatalf("stats %+v: kept on first sight", st)
		}
	}
	if st := v.MemoStats(); st.Hits != 2 || st.Entries != 2 {
		t.Fatalf("stats %+v, want 2 hits of 2 entries", st)
	}
	clk.Advance(time.Minute)
	if _, err := v.Verify(pre); err != nil {
		t.Fatalf("at its last second: %v", err)
	}
	clk.Advance(time.Second)
	_, err := v.Verify(pre)
	wantErr(t, err, ErrExpired)
	clk.Advance(15*time.Minute - time.Minute - time.Second)
	if _, err := v.Verify(hdr); err != nil {
		t.Fatalf("at the skew's edge: %v", err)
	}
	clk.Advance(time.Second)
	_, err = v.Verify(hdr)
	wantErr(t, err, ErrRequestTimeTooSkewed)
	if st := v.MemoStats(); st.Hits != 4 || st.Entries != 0 {
		t.Fatalf("stats %+v, want 4 hits and the expired entries gone", st)
	}
	// Before its time (a clock behind the client's by more than the
	// skew): refused, memo or not.
	clk2 := clock.NewFake(fuzzTime)
	v2 := newMemoVerifier(t, clk2, testCreds(), 0)
	for range 3 {
		if _, err := v2.Verify(pre); err != nil {
			t.Fatal(err)
		}
	}
	clk2.Advance(-16 * time.Minute)
	_, err = v2.Verify(pre)
	wantErr(t, err, ErrAccessDenied)
}

// TestMemoCredentials checks that a hit needs the access key to exist
// still, with the secret it was verified with.
func TestMemoCredentials(t *testing.T) {
	creds := &memoCreds{m: map[string]string{testAK: testSK}}
	clk := clock.NewFake(fuzzTime)
	v := newMemoVerifier(t, clk, creds, 0)
	for _, r := range []*http.Request{
		presignedGet(t, "k", "", fuzzTime, time.Minute, nil),
		memoHeaderSigned(t, http.MethodGet, "k", "", fuzzTime, unsignedPayload, nil),
	} {
		for range 3 {
			if _, err := v.Verify(r); err != nil {
				t.Fatal(err)
			}
		}
		hits := v.MemoStats().Hits
		if hits == 0 {
			t.Fatal("no hits")
		}
		creds.set(testAK, "rotated")
		_, err := v.Verify(r)
		wantErr(t, err, ErrSignatureDoesNotMatch)
		creds.set(testAK, "")
		_, err = v.Verify(r)
		wantErr(t, err, ErrInvalidAccessKeyID)
		creds.set(testAK, testSK)
		if _, err := v.Verify(r); err != nil {
			t.Fatalf("with the secret back: %v", err)
		}
		if got := v.MemoStats().Hits; got != hits {
			t.Fatalf("%d hits after the key changed, want %d", got, hits)
		}
	}
}

// TestMemoUnsignedAmzHeader checks that a hit still refuses an x-amz-*
// header the client did not sign.
func TestMemoUnsignedAmzHeader(t *testing.T) {
	v := newMemoVerifier(t, clock.NewFake(fuzzTime), testCreds(), 0)
	r := memoHeaderSigned(t, http.MethodGet, "k", "", fuzzTime, unsignedPayload, nil)
	for range 3 {
		if _, err := v.Verify(r); err != nil {
			t.Fatal(err)
		}
	}
	m := r.Clone(context.Background())
	m.Header.Set("X-Amz-Copy-Source", "other/key")
	_, err := v.Verify(m)
	wantErr(t, err, ErrAccessDenied)
}

// TestMemoBound checks the memo's size stays within its bound, and that
// what it does not keep still verifies.
func TestMemoBound(t *testing.T) {
	v := newMemoVerifier(t, clock.NewFake(fuzzTime), testCreds(), 40) // held to 32
	for i := range 300 {
		r := presignedGet(t, "k"+strconv.Itoa(i), "", fuzzTime, time.Minute, nil)
		for range 3 {
			if _, err := v.Verify(r); err != nil {
				t.Fatal(err)
			}
		}
		if st := v.MemoStats(); st.Entries > 32 {
			t.Fatalf("after %d requests, %d entries", i+1, st.Entries)
		}
	}
	if st := v.MemoStats(); st.Entries < 16 || st.Hits < 300 {
		t.Fatalf("stats %+v: the memo kept too little", st)
	}
	// A request whose key would be too large is verified every time.
	long := presignedGet(t, "k", "pad="+strings.Repeat("p", memoMaxKey), fuzzTime, time.Minute, nil)
	before := v.MemoStats()
	for range 3 {
		if _, err := v.Verify(long); err != nil {
			t.Fatal(err)
		}
	}
	if after := v.MemoStats(); after.Hits != before.Hits {
		t.Fatalf("a request over the key bound was answered from the memo: %+v", after)
	}
}

// TestMemoConcurrent verifies a few requests, good and bad, from many
// goroutines while the key's secret changes (run with -race).
func TestMemoConcurrent(t *testing.T) {
	creds := &memoCreds{m: map[string]string{testAK: testSK}}
	v := newMemoVerifier(t, clock.NewFake(fuzzTime), creds, 0)
	good := []*http.Request{
		presignedGet(t, "k", "", fuzzTime, time.Minute, nil),
		memoHeaderSigned(t, http.MethodGet, "k", "", fuzzTime, unsignedPayload, nil),
	}
	bad := mutate(rand.New(rand.NewPCG(3, 4)), good[1])
	bad.Header.Set("X-Amz-Date", "20260102T030406Z")
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 300 {
				if g == 0 && i%50 == 0 {
					creds.set(testAK, "rotated")
					creds.set(testAK, testSK)
				}
				if _, err := v.Verify(bad); err == nil {
					t.Error("a bad request verified")
					return
				}
				// A good request racing the rotation may fail.
				_, _ = v.Verify(good[i%2].Clone(context.Background()))
			}
		})
	}
	wg.Wait()
	for _, r := range good {
		if _, err := v.Verify(r); err != nil {
			t.Fatal(err)
		}
	}
	if st := v.MemoStats(); st.Hits == 0 {
		t.Fatalf("no hits: %+v", st)
	}
}

// BenchmarkVerifyMemo verifies one header-signed GET again and again,
// with the memo off and on, and 8192 different ones in turn (more than
// the memo's admission table tells apart, so nearly all are misses):
//
//	go test -run XXX -bench VerifyMemo -benchmem ./internal/s3auth
func BenchmarkVerifyMemo(b *testing.B) {
	for _, c := range []struct {
		name    string
		entries int
		unique  bool
	}{{"off", -1, false}, {"hit", 0, false}, {"off-unique", -1, true}, {"miss-unique", 16, true}} {
		b.Run(c.name, func(b *testing.B) {
			v := newMemoVerifier(b, clock.NewFake(fuzzTime), testCreds(), c.entries)
			n := 1
			if c.unique {
				n = 8192
			}
			reqs := make([]*http.Request, n)
			for i := range reqs {
				reqs[i] = memoHeaderSigned(b, http.MethodGet, "bucket/some/key"+strconv.Itoa(i), "versionId=abc", fuzzTime, sha256Hex(nil),
					http.Header{"Range": {"bytes=0-1023"}})
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				r := *reqs[i%n]
				i++
				if _, err := v.Verify(&r); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
