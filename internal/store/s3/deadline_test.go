package s3store

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/hoard-io/hoard/internal/store"
)

// hangingStore is an S3 endpoint that accepts requests and never answers
// (a store stopped with SIGSTOP looks the same from the client), except a
// GET of "slow", whose headers and first bytes come at once and whose
// body then stalls. release lets the handlers return.
func hangingStore(t *testing.T) (*Store, chan struct{}) {
	t.Helper()
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/slow") {
			w.Header().Set("Content-Length", "1000")
			w.Header().Set("ETag", `"e"`)
			w.Header().Set("Last-Modified", time.Now().UTC().Format(http.TimeFormat))
			w.WriteHeader(http.StatusOK)
			_, _ = w.Write([]byte("first"))
			w.(http.Flusher).Flush()
		}
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	st, err := New(Config{
		Endpoint: srv.URL, AccessKey: "ak", SecretKey: "secretkey",
		CallTimeout: 200 * time.Millisecond, IdleTimeout: 300 * time.Millisecond,
	}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		close(release)
		_ = st.Close()
		srv.Close()
	})
	return st, release
}

// TestHungStore: with a store that never answers, every call ends with
// ErrUnavailable on its own deadline, well before the caller's context
// (which has none) would, and whatever minio-go's retries.
func TestHungStore(t *testing.T) {
	st, _ := hangingStore(t)
	ctx := t.Context()
	calls := map[string]func() error{
		"Get": func() error {
			_, _, _, err := st.Get(ctx, "bucket", "key", store.GetOptions{IfNoneMatch: "e"})
			return err
		},
		"GetBody": func() error {
			body, _, _, err := st.Get(ctx, "bucket", "slow", store.GetOptions{})
			if err != nil {
				return err
			}
			defer body.Close()
			_, err = io.ReadAll(body)
			return err
		},
		"Stat": func() error { _, err := st.Stat(ctx, "bucket", "key"); return err },
		"Put": func() error {
			_, err := st.Put(ctx, "bucket", "key", strings.NewReader("x"), 1, store.PutOptions{})
			return err
		},
		"PutUnseekable": func() error {
			_, err := st.Put(ctx, "bucket", "key", io.LimitReader(strings.NewReader("xyz"), 3), 3, store.PutOptions{})
			return err
		},
		"HeadBucket":  func() error { return st.HeadBucket(ctx, "bucket") },
		"List":        func() error { _, err := st.List(ctx, "bucket", store.ListOptions{}); return err },
		"ListV1":      func() error { _, err := st.List(ctx, "bucket", store.ListOptions{V1: true}); return err },
		"Delete":      func() error { return st.Delete(ctx, "bucket", "key") },
		"ListBuckets": func() error { _, err := st.ListBuckets(ctx); return err },
		"CreateMultipart": func() error {
			_, err := st.CreateMultipartUpload(ctx, "bucket", "key", store.PutOptions{})
			return err
		},
		"UploadPart": func() error {
			_, err := st.UploadPart(ctx, "bucket", "key", "id", 1, strings.NewReader("x"), 1, store.PutOptions{})
			return err
		},
		"ListParts": func() error { _, err := st.ListParts(ctx, "bucket", "key", "id", 0, 0); return err },
		"Copy": func() error {
			_, err := st.Copy(ctx, store.CopySource{Bucket: "bucket", Key: "src"}, "bucket", "key", store.CopyOptions{})
			return err
		},
		"DeleteMany": func() error {
			_, err := st.DeleteMany(ctx, "bucket", []string{"a", "b"})
			return err
		},
		"CompleteMultipart": func() error {
			_, err := st.CompleteMultipartUpload(ctx, "bucket", "key", "id", []store.Part{{PartNumber: 1, ETag: "e"}}, store.CompleteOptions{})
			return err
		},
	}
	for name, call := range calls {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			done := make(chan error, 1)
			go func() { done <- call() }()
			select {
			case err := <-done:
				if !errors.Is(err, store.ErrUnavailable) {
					t.Errorf("error %v, want ErrUnavailable", err)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("the call did not end on its own deadline")
			}
		})
	}
}

// TestWorkScaledDeadlines: calls whose work grows with their size get
// more time in proportion, within bounds.
func TestWorkScaledDeadlines(t *testing.T) {
	st := &Store{callTimeout: 3 * time.Second, responseHeaderTimeout: 2 * time.Minute}
	for _, tc := range []struct {
		size int64
		want time.Duration
	}{
		{0, 3 * time.Second},
		{8 << 20, 4 * time.Second},
		{80 << 20, 13 * time.Second},
		{5 << 30, 2 * time.Minute},
	} {
		if got := st.copyDeadline(tc.size); got != tc.want {
			t.Errorf("copy of %d bytes: %v, want %v", tc.size, got, tc.want)
		}
	}
	for _, tc := range []struct {
		n, per int
		want   time.Duration
	}{
		{1, deletesPerCall, 3 * time.Second},
		{100, deletesPerCall, 3 * time.Second},
		{101, deletesPerCall, 6 * time.Second},
		{1000, deletesPerCall, 30 * time.Second},
		{10000, partsPerCall, 30 * time.Second},
	} {
		ctx, cancel := st.bounded(t.Context(), tc.n, tc.per)
		dl, _ := ctx.Deadline()
		cancel()
		if got := time.Until(dl); got > tc.want || got < tc.want-time.Second {
			t.Errorf("%d units at %d a call: %v, want %v", tc.n, tc.per, got, tc.want)
		}
	}
}

// TestCallerCancelStaysCanceled: a caller's own deadline is reported as
// the caller's, not as the store being unavailable.
func TestCallerCancelStaysCanceled(t *testing.T) {
	st, _ := hangingStore(t)
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	_, err := st.Stat(ctx, "bucket", "key")
	if errors.Is(err, store.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("caller's deadline reported as %v", err)
	}
}

// TestSlowReaderNotCutOff: the idle timeout counts only the store's share
// of a download: a reader that pauses longer than it between reads (a
// slow client) still gets the whole body.
func TestSlowReaderNotCutOff(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "10")
		w.Header().Set("ETag", `"e"`)
		w.Header().Set("Last-Modified", time.Now().UTC().Format(http.TimeFormat))
		_, _ = w.Write([]byte("0123456789"))
	}))
	t.Cleanup(srv.Close)
	st, err := New(Config{
		Endpoint: srv.URL, AccessKey: "ak", SecretKey: "secretkey",
		CallTimeout: time.Second, IdleTimeout: 50 * time.Millisecond,
	}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	body, _, _, err := st.Get(t.Context(), "bucket", "key", store.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer body.Close()
	var got []byte
	buf := make([]byte, 3)
	for {
		n, err := body.Read(buf)
		got = append(got, buf[:n]...)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("read after %q: %v", got, err)
		}
		time.Sleep(150 * time.Millisecond) // a slow client, not a stalled store
	}
	if string(got) != "0123456789" {
		t.Errorf("body %q", got)
	}
}
