package s3store

import (
	"bufio"
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/hoard-io/hoard/internal/store"
)

// maxEventLine bounds one line of the notification stream (one event
// batch); a longer one breaks the stream.
const maxEventLine = 1 << 20

var errListenSilent = errors.New("s3store: change stream silent past its heartbeat")

var _ store.Listener = (*Store)(nil)

// Listen follows bucket's object changes with MinIO's listen API (GET
// /bucket?events=...&ping=N); see store.Listener. The store is asked to
// ping every heartbeat/3 (at least 1 s): its first ping, sent once the
// listener is registered, calls ready, and a stream silent for heartbeat
// is cut. Every line is bounded (1 MiB).
func (s *Store) Listen(ctx context.Context, bucket string, heartbeat time.Duration, ready func(), each func(store.Change)) error {
	if heartbeat < 3*time.Second {
		heartbeat = 3 * time.Second
	}
	ping := int(heartbeat / 3 / time.Second)
	q := url.Values{}
	q.Set("ping", strconv.Itoa(ping))
	q.Set("prefix", "")
	q.Set("suffix", "")
	q["events"] = []string{"s3:ObjectCreated:*", "s3:ObjectRemoved:*"}
	// Identity: a compressed stream would sit in the store's compressor
	// until kilobytes of events filled it, pings included.
	req := &http.Request{Method: http.MethodGet, URL: &url.URL{Path: "/" + bucket, RawQuery: q.Encode()},
		Header: http.Header{"Accept-Encoding": {"identity"}}}
	out, err := s.outgoing(ctx, req)
	if err != nil {
		return err
	}
	cctx, wd := newWatchdog(ctx, s.callTimeout, heartbeat, errListenSilent)
	defer wd.stop()
	resp, err := s.transport.RoundTrip(out.WithContext(cctx))
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("s3store: listen %s: %w: %v", bucket, store.ErrUnavailable, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return listenRefused(bucket, resp)
	}
	wd.kick()
	// Any bytes are a sign of life: the store sends its stream in blocks
	// that need not end at a line.
	r := bufio.NewReaderSize(kickReader{resp.Body, wd}, 64<<10)
	first := true
	for {
		line, err := readLine(r)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if c := context.Cause(cctx); c != nil {
				err = c
			}
			return fmt.Errorf("s3store: listen %s: %w: %v", bucket, store.ErrUnavailable, err)
		}
		line = strings.TrimSpace(line)
		if line == "" {
			continue // a keep-alive
		}
		var msg eventMessage
		if err := json.Unmarshal([]byte(line), &msg); err != nil {
			return fmt.Errorf("s3store: listen %s: %w: malformed event (%d bytes, ...%q): %v", bucket, store.ErrUnavailable, len(line), line[max(0, len(line)-300):], err)
		}
		if first {
			first = false
			if ready != nil {
				ready()
			}
		}
		for _, rec := range msg.Records {
			if c, ok := rec.Change(); ok && c.Bucket == bucket {
				each(c)
			}
		}
	}
}

// readLine reads one whole line of at most maxEventLine bytes; a line the
// stream ends in the middle of is an error, never an event.
func readLine(r *bufio.Reader) (string, error) {
	var b strings.Builder
	for {
		part, err := r.ReadSlice('\n')
		if b.Len()+len(part) > maxEventLine {
			return "", errors.New("event line too long")
		}
		b.Write(part)
		switch {
		case err == nil:
			return b.String(), nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF):
			return "", io.ErrUnexpectedEOF
		default:
			return "", err
		}
	}
}

// kickReader kicks the watchdog on every read that brings bytes.
type kickReader struct {
	r  io.Reader
	wd *watchdog
}

func (k kickReader) Read(p []byte) (int, error) {
	n, err := k.r.Read(p)
	if n > 0 {
		k.wd.kick()
	}
	return n, err
}

// listenRefused turns a refusal to listen into an error.
func listenRefused(bucket string, resp *http.Response) error {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var e struct {
		Code    string `xml:"Code"`
		Message string `xml:"Message"`
	}
	_ = xml.Unmarshal(body, &e)
	switch {
	case resp.StatusCode >= 500 && e.Code != "NotImplemented":
		return fmt.Errorf("s3store: listen %s: %w: %d %s", bucket, store.ErrUnavailable, resp.StatusCode, e.Code)
	case e.Code == "NoSuchBucket":
		return fmt.Errorf("s3store: listen %s: %w", bucket, store.ErrNoSuchBucket)
	case e.Code == "AccessDenied" || resp.StatusCode == http.StatusForbidden:
		return &store.APIError{Code: "AccessDenied", Message: e.Message, StatusCode: resp.StatusCode}
	}
	return fmt.Errorf("s3store: listen %s: %w (%d %s)", bucket, store.ErrListenUnsupported, resp.StatusCode, e.Code)
}

// eventMessage is one line of the stream: S3's event notification shape.
type eventMessage struct {
	Records []store.EventRecord `json:"Records"`
}
