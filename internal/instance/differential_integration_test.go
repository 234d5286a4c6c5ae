//go:build integration && linux

package instance_test

// The differential test from Go: cases of aws-sdk-go-v2 calls (and
// presigned URLs from aws-sdk-go-v2 and minio-go) sent once to the store
// (MinIO, then versitygw) directly and once through a real `hoard serve`
// in front of it, each time
// in a fresh bucket; the answers (status, error code, the headers that
// matter, the body) must be equal, or the difference listed with its
// reason in python/tests/s3_differences.json (ids "go/<case>"), which
// python/tests/test_differential.py shares. A listed case that no longer
// differs fails too, so the list stays true.

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	s3v2 "github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/minio/minio-go/v7"

	"github.com/hoard-io/hoard/internal/control"
)

// diffStep is one normalised answer.
type diffStep struct {
	Op      string
	Status  int
	Code    string
	Headers map[string]string
	Body    string
}

// diffRecorder is an http.RoundTripper keeping the last answer, body read.
type diffRecorder struct {
	base http.RoundTripper
	mu   sync.Mutex
	last *http.Response
	body []byte
	err  error
}

func (r *diffRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := r.base.RoundTrip(req)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.last, r.body, r.err = nil, nil, err
	if err != nil {
		return nil, err
	}
	b, rerr := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	resp.Body.Close()
	if rerr != nil {
		r.err = rerr
		return nil, rerr
	}
	resp.Body = io.NopCloser(bytes.NewReader(b))
	r.last, r.body = resp, b
	return resp, nil
}

func (r *diffRecorder) reset() {
	r.mu.Lock()
	r.last, r.body, r.err = nil, nil, nil
	r.mu.Unlock()
}

// diffSide is one side of the comparison.
type diffSide struct {
	name     string
	endpoint string
	ak, sk   string
	rec      *diffRecorder
	sdk      *s3v2.Client
	presign  *s3v2.PresignClient
	mc       *minio.Client
}

func newDiffSide(t *testing.T, name, endpoint, ak, sk string) *diffSide {
	t.Helper()
	rec := &diffRecorder{base: &http.Transport{ResponseHeaderTimeout: 10 * time.Second}}
	sdk := s3v2.New(s3v2.Options{
		BaseEndpoint: aws.String(endpoint), Region: "us-east-1", UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(ak, sk, ""),
		HTTPClient:  &http.Client{Transport: rec, Timeout: 20 * time.Second},
		Retryer:     aws.NopRetryer{},
	})
	return &diffSide{name: name, endpoint: endpoint, ak: ak, sk: sk, rec: rec, sdk: sdk,
		presign: s3v2.NewPresignClient(sdk), mc: minioClient(t, endpoint, ak, sk)}
}

// diffCtx is what a case gets.
type diffCtx struct {
	t      *testing.T
	ctx    context.Context
	side   *diffSide
	prefix string // every bucket name of this run starts with it
	bucket string
	steps  []diffStep
}

// call records the answer to the SDK call fn made.
func (d *diffCtx) call(op string, fn func() error) {
	d.side.rec.reset()
	err := fn()
	rec := d.side.rec
	rec.mu.Lock()
	resp, body, rerr := rec.last, rec.body, rec.err
	rec.mu.Unlock()
	if resp == nil {
		msg := "no answer"
		if rerr != nil {
			msg = "transport: " + errClass(rerr)
		} else if err != nil {
			msg = "client: refused before sending"
		}
		d.steps = append(d.steps, diffStep{Op: op, Code: msg})
		return
	}
	d.steps = append(d.steps, d.normalise(op, resp.StatusCode, resp.Header, body))
}

func errClass(err error) string {
	if strings.Contains(err.Error(), "timeout") || strings.Contains(err.Error(), "deadline") {
		return "timeout"
	}
	return "error"
}

// url sends an unsigned request to a (presigned) URL.
func (d *diffCtx) url(op, method, u string, body []byte, hdr http.Header) {
	req, err := http.NewRequestWithContext(d.ctx, method, u, bytes.NewReader(body))
	if err != nil {
		d.t.Fatal(err)
	}
	for k, vs := range hdr {
		if strings.EqualFold(k, "host") {
			continue
		}
		req.Header[k] = vs
	}
	req.ContentLength = int64(len(body))
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		d.steps = append(d.steps, diffStep{Op: op, Code: "transport: " + errClass(err)})
		return
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	d.steps = append(d.steps, d.normalise(op, resp.StatusCode, resp.Header, b))
}

var (
	diffValueHeaders = []string{"ETag", "Content-Length", "Content-Type", "Content-Range", "Content-Encoding",
		"Content-Disposition", "Content-Language", "Cache-Control", "Expires", "Accept-Ranges",
		"X-Amz-Tagging-Count", "X-Amz-Storage-Class", "X-Amz-Delete-Marker", "X-Amz-Checksum-Type",
		"X-Amz-Mp-Parts-Count", "Location"}
	diffPresenceHeaders = []string{"Last-Modified", "X-Amz-Version-Id"}
	diffDropXML         = map[string]bool{"RequestId": true, "HostId": true, "LastModified": true, "CreationDate": true,
		"Initiated": true, "Owner": true, "Initiator": true, "Date": true}
	diffMaskXML = map[string]bool{"UploadId": true, "NextUploadIdMarker": true, "UploadIdMarker": true,
		"ContinuationToken": true, "NextContinuationToken": true, "VersionIdMarker": true, "NextVersionIdMarker": true,
		"VersionId": true}
)

func (d *diffCtx) text(s string) string {
	u, _ := url.Parse(d.side.endpoint)
	s = strings.ReplaceAll(s, d.side.endpoint, "<endpoint>")
	s = strings.ReplaceAll(s, u.Host, "<host>")
	return strings.ReplaceAll(s, d.prefix, "<bucket>")
}

func (d *diffCtx) normalise(op string, status int, h http.Header, body []byte) diffStep {
	st := diffStep{Op: op, Status: status, Headers: map[string]string{}}
	for _, k := range diffValueHeaders {
		if v := h.Get(k); v != "" {
			st.Headers[strings.ToLower(k)] = d.text(v)
		}
	}
	for _, k := range diffPresenceHeaders {
		if v := h.Get(k); v != "" {
			st.Headers[strings.ToLower(k)] = "<present>"
		}
	}
	for k, vs := range h {
		lk := strings.ToLower(k)
		if strings.HasPrefix(lk, "x-amz-meta-") || strings.HasPrefix(lk, "x-amz-checksum-") {
			st.Headers[lk] = strings.Join(vs, ",")
		}
	}
	isXML := strings.Contains(h.Get("Content-Type"), "xml") || bytes.HasPrefix(bytes.TrimSpace(body), []byte("<?xml"))
	switch {
	case len(body) == 0:
	case isXML:
		tree, code := d.canonicalXML(body)
		if code != "" {
			// Error documents: status and code; the rest is worded
			// differently by every store (docs/s3-api.md).
			st.Code = code
		} else {
			st.Body = tree
		}
	default:
		sum := sha256.Sum256(body)
		st.Body = fmt.Sprintf("%d bytes sha256:%s", len(body), hex.EncodeToString(sum[:8]))
	}
	read := strings.HasPrefix(op, "GetObject") || strings.HasPrefix(op, "HeadObject") || strings.HasPrefix(op, "presigned GET") ||
		strings.HasPrefix(op, "presigned HEAD") || strings.HasPrefix(op, "minio-go presigned GET")
	if status >= 300 || !read {
		delete(st.Headers, "accept-ranges")
	}
	if len(body) == 0 && (status >= 300 || strings.HasPrefix(op, "HeadBucket")) {
		delete(st.Headers, "content-type")
	}
	if isXML || status >= 300 || len(body) == 0 {
		delete(st.Headers, "content-length")
	}
	if status >= 300 && status != 304 && status != 412 {
		delete(st.Headers, "etag")
	}
	return st
}

type xmlNode struct {
	tag      string
	text     string
	children []*xmlNode
}

// canonicalXML renders an XML document with the per-run parts taken out
// and sibling elements sorted by name (stably: list entries keep their
// order). For an S3 error document it returns its code instead.
func (d *diffCtx) canonicalXML(body []byte) (string, string) {
	dec := xml.NewDecoder(bytes.NewReader(body))
	var stack []*xmlNode
	var root *xmlNode
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			sum := sha256.Sum256(body)
			return "unparseable " + hex.EncodeToString(sum[:8]), ""
		}
		switch tk := tok.(type) {
		case xml.StartElement:
			n := &xmlNode{tag: tk.Name.Local}
			if len(stack) > 0 {
				stack[len(stack)-1].children = append(stack[len(stack)-1].children, n)
			} else {
				root = n
			}
			stack = append(stack, n)
		case xml.CharData:
			if len(stack) > 0 {
				stack[len(stack)-1].text += string(tk)
			}
		case xml.EndElement:
			stack = stack[:len(stack)-1]
		}
	}
	if root == nil {
		return "", ""
	}
	if root.tag == "Error" {
		for _, c := range root.children {
			if c.tag == "Code" {
				return "", strings.TrimSpace(c.text)
			}
		}
	}
	var b strings.Builder
	d.render(&b, root)
	return b.String(), ""
}

func (d *diffCtx) render(b *strings.Builder, n *xmlNode) {
	text := strings.TrimSpace(n.text)
	if diffMaskXML[n.tag] && text != "" && text != "null" {
		text = "<masked>"
	}
	fmt.Fprintf(b, "<%s>%s", n.tag, d.text(text))
	kids := slices.DeleteFunc(slices.Clone(n.children), func(c *xmlNode) bool { return diffDropXML[c.tag] })
	sort.SliceStable(kids, func(i, j int) bool { return kids[i].tag < kids[j].tag })
	for _, c := range kids {
		d.render(b, c)
	}
	fmt.Fprintf(b, "</%s>", n.tag)
}

func diffStepsOf(a, b []diffStep) []string {
	var out []string
	if len(a) != len(b) {
		out = append(out, fmt.Sprintf("%d steps against the store, %d through hoard", len(a), len(b)))
	}
	for i := range min(len(a), len(b)) {
		x, y := a[i], b[i]
		if x.Status != y.Status {
			out = append(out, fmt.Sprintf("step %d %s: status: store %d, hoard %d", i, x.Op, x.Status, y.Status))
		}
		if x.Code != y.Code {
			out = append(out, fmt.Sprintf("step %d %s: code: store %q, hoard %q", i, x.Op, x.Code, y.Code))
		}
		if x.Body != y.Body {
			out = append(out, fmt.Sprintf("step %d %s: body: store %q, hoard %q", i, x.Op, x.Body, y.Body))
		}
		keys := map[string]bool{}
		for k := range x.Headers {
			keys[k] = true
		}
		for k := range y.Headers {
			keys[k] = true
		}
		for _, k := range slices.Sorted(func(yield func(string) bool) {
			for k := range keys {
				if !yield(k) {
					return
				}
			}
		}) {
			if x.Headers[k] != y.Headers[k] {
				out = append(out, fmt.Sprintf("step %d %s: header %s: store %q, hoard %q", i, x.Op, k, x.Headers[k], y.Headers[k]))
			}
		}
	}
	return out
}

// knownDifference is an entry of python/tests/s3_differences.json.
type knownDifference struct {
	Reason       string   `json:"reason"`
	Pending      string   `json:"pending"`
	Where        []string `json:"where"`
	Intermittent []string `json:"intermittent"`
}

func loadDifferences(t *testing.T) map[string]knownDifference {
	t.Helper()
	root := filepath.Dir(filepath.Dir(hoardBinary(t))) // <module>/bin/hoard
	p := filepath.Join(root, "python", "tests", "s3_differences.json")
	if _, err := os.Stat(p); err != nil {
		wd, _ := os.Getwd()
		p = filepath.Join(wd, "..", "..", "python", "tests", "s3_differences.json")
	}
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("read the list of differences: %v", err)
	}
	var m map[string]knownDifference
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatalf("parse %s: %v", p, err)
	}
	return m
}

// startServe runs `hoard serve` in front of storeEndpoint, its listeners
// on ports the kernel picks, and returns its S3 endpoint as its ready file
// gives it.
func startServe(t *testing.T, storeEndpoint string) string {
	t.Helper()
	dir := t.TempDir()
	logPath, readyPath := filepath.Join(dir, "hoard.log"), filepath.Join(dir, "ready.json")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(hoardBinary(t), "serve", "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0",
		"--ready-file", readyPath, "--store-endpoint", storeEndpoint, "--budget", "64MiB", "--log-level", "warn")
	cmd.Env = append(os.Environ(), "HOARD_ACCESS_KEY="+clientAK, "HOARD_SECRET_KEY="+clientSK,
		"HOARD_STORE_ACCESS_KEY="+storeAK, "HOARD_STORE_SECRET_KEY="+storeSK)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); logf.Close(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("hoard serve log:\n%s", b)
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case <-exited:
			b, _ := os.ReadFile(logPath)
			t.Fatalf("hoard serve exited:\n%s", b)
		default:
		}
		if b, err := os.ReadFile(readyPath); err == nil {
			var ready control.Ready
			if err := json.Unmarshal(b, &ready); err != nil || ready.Endpoint == "" {
				t.Fatalf("ready file %s: %v", b, err)
			}
			return ready.Endpoint
		}
		if time.Now().After(deadline) {
			t.Fatal("hoard serve not ready after 30 s")
		}
		time.Sleep(50 * time.Millisecond) // polling a child process's readiness
	}
}

// TestDifferentialSDK runs goDiffCases against each store directly and
// through hoard in front of it.
func TestDifferentialSDK(t *testing.T) {
	known := loadDifferences(t)
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			srv := startStore(t, st.start, filepath.Join(t.TempDir(), "data"), "127.0.0.1:0")
			t.Cleanup(func() { srv.Close() })
			hoardEndpoint := startServe(t, srv.Endpoint())
			store := newDiffSide(t, "store", srv.Endpoint(), storeAK, storeSK)
			hoard := newDiffSide(t, "hoard", hoardEndpoint, clientAK, clientSK)
			where := "one/" + st.name
			for _, c := range goDiffCases {
				t.Run(c.id, func(t *testing.T) {
					want := runDiffCase(t, store, c)
					got := runDiffCase(t, hoard, c)
					diffs := diffStepsOf(want, got)
					reportDifferences("go/"+c.id, st.name, diffs)
					k, listed := known["go/"+c.id]
					applies := listed && slices.Contains(k.Where, where)
					maybe := listed && slices.Contains(k.Intermittent, where)
					if len(diffs) > 0 && !applies && !maybe {
						t.Errorf("hoard answers differently from the store, and python/tests/s3_differences.json does not list go/%s for %s:\n  %s",
							c.id, where, strings.Join(diffs, "\n  "))
					}
					if len(diffs) == 0 && applies && !maybe {
						t.Errorf("go/%s is listed in python/tests/s3_differences.json for %s (%s) but no longer differs: remove it there and run python/tests/s3_differences_doc.py",
							c.id, where, k.Reason)
					}
				})
			}
		})
	}
}

// reportDifferences appends what differed, listed or not, to the file
// named by $HOARD_DIFF_REPORT (JSON lines, as the Python test writes), to
// review the list.
func reportDifferences(id, store string, diffs []string) {
	p := os.Getenv("HOARD_DIFF_REPORT")
	if p == "" {
		return
	}
	line, _ := json.Marshal(map[string]any{"case": id, "setup": "one", "store": store, "diffs": diffs})
	f, err := os.OpenFile(p, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	_, _ = f.Write(append(line, '\n'))
}

func runDiffCase(t *testing.T, side *diffSide, c goDiffCase) []diffStep {
	t.Helper()
	var rnd [5]byte
	_, _ = rand.Read(rnd[:])
	prefix := "dg" + hex.EncodeToString(rnd[:])
	slug := strings.Trim(regexp.MustCompile(`[^a-z0-9]+`).ReplaceAllString(strings.ToLower(c.id), "-"), "-")
	d := &diffCtx{t: t, ctx: t.Context(), side: side, prefix: prefix, bucket: prefix + "-" + slug}
	if _, err := side.sdk.CreateBucket(d.ctx, &s3v2.CreateBucketInput{Bucket: &d.bucket}); err != nil {
		t.Fatalf("%s: create bucket: %v", side.name, err)
	}
	c.fn(d)
	return d.steps
}
