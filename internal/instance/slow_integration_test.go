//go:build integration

package instance_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/minio/minio-go/v7"

	"github.com/hoard-io/hoard/internal/instance"
	"github.com/hoard-io/hoard/internal/localstore"
)

// Many clients that declare a body and then send a few bytes now and then
// are all cut off by the idle timeout or the minimum rate, commit nothing, and evict
// nothing from a full cache.
func TestSlowUploads(t *testing.T) {
	const (
		budget  = 8 << 20
		objSize = 512 << 10
		idle    = time.Second
	)
	// 50 in make test; the 300 by hand (HOARD_SLOW_UPLOADS=300).
	slow := 50
	if n, err := strconv.Atoi(os.Getenv("HOARD_SLOW_UPLOADS")); err == nil && n > 0 {
		slow = n
	}
	e := newEnv(t, localstore.StartMinIO, func(c *instance.Config) {
		c.Cachelet.Cache.Budget = budget
		c.BodyIdleTimeout = idle
		c.BodyRateGrace = 2 * idle
	})
	ctx := context.Background()
	if err := e.minio.MakeBucket(ctx, "slow", minio.MakeBucketOptions{}); err != nil {
		t.Fatal(err)
	}
	obj := randomBytes(t, objSize)
	const n = budget / objSize
	for i := range n {
		if _, err := e.minio.PutObject(ctx, "slow", fmt.Sprintf("o%d", i), bytes.NewReader(obj), objSize, minio.PutObjectOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	cl := e.in.Cachelet()
	before := cl.Stats()
	if before.Objects != n {
		t.Fatalf("cached %d objects, want %d", before.Objects, n)
	}

	host := strings.TrimPrefix(e.in.Endpoint(), "http://")
	big := bytes.Repeat([]byte("s"), 4<<20)
	sum := sha256.Sum256(big)
	hash := hex.EncodeToString(sum[:])
	stop := make(chan struct{})
	defer close(stop)
	type result struct {
		status int
		code   string
		took   time.Duration
		err    error
	}
	results := make([]result, slow)
	var wg sync.WaitGroup
	for i := range slow {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Half stall past the idle timeout; half never stall but
			// stay far below the minimum rate once its grace is over.
			every := 2 * idle
			if i%2 == 1 {
				every = idle / 2
			}
			results[i] = slowPut(host, fmt.Sprintf("/slow/big%d", i), big, hash, every, stop)
		}()
	}
	// While they hang, reads stay local hits.
	for i := range n {
		req, _ := http.NewRequest(http.MethodGet, e.in.Endpoint()+fmt.Sprintf("/slow/o%d", i), nil)
		signReq(t, req, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if got := resp.Header.Get("x-hoard-read"); resp.StatusCode != http.StatusOK || got != "local_hit" {
			t.Fatalf("get o%d while uploads hang: status %d, read %q", i, resp.StatusCode, got)
		}
	}
	wg.Wait()
	for i, r := range results {
		if r.err != nil {
			t.Fatalf("slow put %d: %v", i, r.err)
		}
		// Generous: the bound is the grace period, plus scheduling.
		if r.status != http.StatusBadRequest || r.code != "RequestTimeout" || r.took > 20*idle {
			t.Fatalf("slow put %d: status %d %s after %v, want 400 RequestTimeout", i, r.status, r.code, r.took)
		}
		if _, err := e.direct.StatObject(ctx, "slow", fmt.Sprintf("big%d", i), minio.StatObjectOptions{}); err == nil {
			t.Fatalf("the store committed slow put %d", i)
		}
	}
	if st := cl.Stats(); st.Evictions != before.Evictions || st.Objects != n || st.Reserved != 0 {
		t.Fatalf("slow uploads disturbed the cache: before %+v, after %+v", before, st)
	}
}

func signReq(t *testing.T, req *http.Request, hash string) {
	t.Helper()
	req.Header.Set("X-Amz-Content-Sha256", hash)
	if err := v4.NewSigner().SignHTTP(context.Background(), aws.Credentials{AccessKeyID: clientAK, SecretAccessKey: clientSK},
		req, hash, "s3", "us-east-1", time.Now()); err != nil {
		t.Fatal(err)
	}
}

// slowPut sends a PUT declaring body but sending 100 bytes every interval,
// and reads its answer.
func slowPut(host, path string, body []byte, hash string, every time.Duration, stop chan struct{}) (r struct {
	status int
	code   string
	took   time.Duration
	err    error
}) {
	start := time.Now()
	req, _ := http.NewRequest(http.MethodPut, "http://"+host+path, nil)
	req.ContentLength = int64(len(body))
	req.Header.Set("X-Amz-Content-Sha256", hash)
	if r.err = v4.NewSigner().SignHTTP(context.Background(), aws.Credentials{AccessKeyID: clientAK, SecretAccessKey: clientSK},
		req, hash, "s3", "us-east-1", time.Now()); r.err != nil {
		return r
	}
	conn, err := net.Dial("tcp", host)
	if err != nil {
		r.err = err
		return r
	}
	defer conn.Close()
	var head bytes.Buffer
	fmt.Fprintf(&head, "PUT %s HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\n", path, host, len(body))
	for k, vs := range req.Header {
		for _, v := range vs {
			fmt.Fprintf(&head, "%s: %s\r\n", k, v)
		}
	}
	head.WriteString("\r\n")
	if _, r.err = conn.Write(head.Bytes()); r.err != nil {
		return r
	}
	go func() {
		for off := 0; off+100 <= len(body); off += 100 {
			if _, err := conn.Write(body[off : off+100]); err != nil {
				return
			}
			select {
			case <-stop:
				return
			case <-time.After(every):
			}
		}
	}()
	_ = conn.SetReadDeadline(time.Now().Add(60 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), req)
	if err != nil {
		r.err = err
		return r
	}
	defer resp.Body.Close()
	r.status, r.took = resp.StatusCode, time.Since(start)
	var buf bytes.Buffer
	_, _ = buf.ReadFrom(resp.Body)
	if i := strings.Index(buf.String(), "<Code>"); i >= 0 {
		r.code, _, _ = strings.Cut(buf.String()[i+len("<Code>"):], "</Code>")
	}
	return r
}
