// Package notify posts cache-trigger events: after every object write a
// cachelet answered with success, an event shaped like AWS S3's event
// notification ({"Records":[...]}) goes to one HTTP endpoint, the
// platform's controller, which fires the functions bound to the object.
//
// Events are queued in memory (bounded; when the queue is full new events
// are dropped and counted) and posted by one background sender, in order,
// one JSON document per event. A post that fails for a reason that may
// pass (a connection error, a 5xx, 408, 429) is retried with exponential
// backoff for a bounded time, then dropped with a log line: a trigger is
// best effort, and a down controller must not grow the cachelet's memory
// or hold its writes back. Close drains what is queued.
package notify

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hoard-io/hoard/internal/media"
)

// Event names, as AWS S3 names them.
const (
	ObjectCreatedPut                     = "ObjectCreated:Put"
	ObjectCreatedCopy                    = "ObjectCreated:Copy"
	ObjectCreatedCompleteMultipartUpload = "ObjectCreated:CompleteMultipartUpload"
)

// Event is one object write to notify.
type Event struct {
	// Name is one of the ObjectCreated constants.
	Name string
	// Time is when the write was answered; zero means when Notify is
	// called.
	Time   time.Time
	Region string
	Bucket string
	// Key is the object's key as is; the message carries it URL-encoded,
	// as AWS does.
	Key  string
	Size int64
	// ETag is the one the client got, without quotes.
	ETag string
	// Principal is the access key the write was signed with.
	Principal string
	// SourceIP is the client's address, without the port.
	SourceIP string
	// RequestID is the x-amz-request-id the client got.
	RequestID string
	// Media is what the cachelet read of the object's first bytes as it
	// was written (package media); nil for none.
	Media *media.Features
}

// Message is the JSON document posted for one event: the S3 event
// notification format (one record) with the cachelet that saw the write.
type Message struct {
	Records []Record `json:"Records"`
	Hoard   Origin   `json:"hoard"`
}

// Origin says which cachelet of which application saw the write, and
// what it read of the object written (a message has one record): its
// media features, which the controller gives the memory models of the
// invocations that read that version (docs/platform.md).
type Origin struct {
	App      string          `json:"app"`
	Cachelet string          `json:"cachelet"`
	Media    *media.Features `json:"media,omitempty"`
}

// Record is one S3 event notification record (event version 2.1).
type Record struct {
	EventVersion      string            `json:"eventVersion"`
	EventSource       string            `json:"eventSource"`
	AWSRegion         string            `json:"awsRegion"`
	EventTime         string            `json:"eventTime"`
	EventName         string            `json:"eventName"`
	UserIdentity      UserIdentity      `json:"userIdentity"`
	RequestParameters RequestParameters `json:"requestParameters"`
	ResponseElements  ResponseElements  `json:"responseElements"`
	S3                S3Entity          `json:"s3"`
}

// UserIdentity names who made the write.
type UserIdentity struct {
	PrincipalID string `json:"principalId"`
}

// RequestParameters say where the write came from.
type RequestParameters struct {
	SourceIPAddress string `json:"sourceIPAddress"`
}

// ResponseElements identify the write's response.
type ResponseElements struct {
	RequestID string `json:"x-amz-request-id"`
}

// S3Entity is the bucket and object written.
type S3Entity struct {
	SchemaVersion   string       `json:"s3SchemaVersion"`
	ConfigurationID string       `json:"configurationId"`
	Bucket          BucketEntity `json:"bucket"`
	Object          ObjectEntity `json:"object"`
}

// BucketEntity names the bucket.
type BucketEntity struct {
	Name string `json:"name"`
	ARN  string `json:"arn"`
}

// ObjectEntity describes the object written. Key is URL-encoded (form
// encoding: a space is "+", slashes stay); Sequencer orders the events of
// one cachelet: 16 hex digits, a greater value is later.
type ObjectEntity struct {
	Key       string `json:"key"`
	Size      int64  `json:"size"`
	ETag      string `json:"eTag"`
	Sequencer string `json:"sequencer"`
}

// EncodeKey URL-encodes an object key as S3 event notifications carry it:
// form encoding (a space becomes "+", a "+" becomes "%2B"), slashes kept.
// url.QueryUnescape (Python's urllib.parse.unquote_plus) reverses it.
func EncodeKey(key string) string {
	segs := strings.Split(key, "/")
	for i, s := range segs {
		segs[i] = url.QueryEscape(s)
	}
	return strings.Join(segs, "/")
}

// Source is the eventSource of hoard's records.
const Source = "hoard:cachelet"

// Defaults of Config.
const (
	DefaultQueueSize = 10000
	DefaultRetryFor  = 30 * time.Second
	DefaultTimeout   = 10 * time.Second
	DefaultBackoff   = 100 * time.Millisecond
	maxBackoff       = 5 * time.Second
)

// Config configures a Notifier.
type Config struct {
	// URL receives the events (POST, application/json). Required.
	URL string
	// Token, when set, is sent as "Authorization: Bearer TOKEN".
	Token string
	// App and Cachelet name the sender in each message's "hoard" field.
	App, Cachelet string
	// QueueSize bounds the events waiting to be sent; past it new events
	// are dropped. Default DefaultQueueSize (10,000).
	QueueSize int
	// RetryFor bounds how long one event is retried before it is dropped.
	// Default DefaultRetryFor (30 s).
	RetryFor time.Duration
	// Timeout bounds one post. Default DefaultTimeout (10 s).
	Timeout time.Duration
	// Backoff is the wait before the first retry; each further retry
	// doubles it, up to 5 s. Default DefaultBackoff (100 ms).
	Backoff time.Duration
	// Client posts the events. Default: a client of its own.
	Client *http.Client
	// Logger, when nil, discards.
	Logger *slog.Logger
	// Registerer, when set, gets hoard_notify_events_total{result} and
	// hoard_notify_queued.
	Registerer prometheus.Registerer
}

// Validate checks the config and fills in the defaults.
func (c *Config) Validate() error {
	u, err := url.Parse(c.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("notify: URL %q is not an http(s) URL", c.URL)
	}
	if c.QueueSize == 0 {
		c.QueueSize = DefaultQueueSize
	}
	if c.RetryFor == 0 {
		c.RetryFor = DefaultRetryFor
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.Backoff == 0 {
		c.Backoff = DefaultBackoff
	}
	if c.QueueSize < 0 || c.RetryFor < 0 || c.Timeout < 0 || c.Backoff < 0 {
		return errors.New("notify: queue size and durations must be positive")
	}
	if c.Client == nil {
		c.Client = &http.Client{}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// Notifier queues events and posts them in the background. Safe for
// concurrent use.
type Notifier struct {
	cfg   Config
	log   *slog.Logger
	queue chan queued

	mu     sync.RWMutex // guards closed against sends on queue
	closed bool

	seq atomic.Uint64 // the last sequencer handed out

	stop context.CancelFunc // aborts the sender (Close past its deadline)
	done chan struct{}      // closed when the sender has exited
	lost atomic.Int64       // events Close gave up on

	events *prometheus.CounterVec // hoard_notify_events_total{result}
}

// queued is an event with its sequencer, fixed when it was queued.
type queued struct {
	ev  Event
	seq uint64
}

// New starts a Notifier's sender.
func New(cfg Config) (*Notifier, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	ctx, stop := context.WithCancel(context.Background())
	n := &Notifier{
		cfg:   cfg,
		log:   cfg.Logger,
		queue: make(chan queued, cfg.QueueSize),
		stop:  stop,
		done:  make(chan struct{}),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hoard_notify_events_total",
			Help: "Cache-trigger events by result: sent, dropped (queue full or closed), failed (refused, or retried past the limit).",
		}, []string{"result"}),
	}
	for _, r := range []string{"sent", "dropped", "failed"} {
		n.events.WithLabelValues(r)
	}
	if cfg.Registerer != nil {
		cfg.Registerer.MustRegister(n.events, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "hoard_notify_queued",
			Help: "Cache-trigger events waiting to be sent.",
		}, func() float64 { return float64(len(n.queue)) }))
	}
	go n.run(ctx)
	return n, nil
}

// Notify queues ev for sending and returns at once. When the queue is full,
// or the Notifier is closed, ev is dropped (and counted).
func (n *Notifier) Notify(ev Event) {
	if ev.Time.IsZero() {
		ev.Time = time.Now()
	}
	q := queued{ev: ev, seq: n.sequence(ev.Time)}
	n.mu.RLock()
	defer n.mu.RUnlock()
	if n.closed {
		n.events.WithLabelValues("dropped").Inc()
		return
	}
	select {
	case n.queue <- q:
	default:
		n.events.WithLabelValues("dropped").Inc()
		n.log.Debug("notification queue full, event dropped", "bucket", ev.Bucket, "key", ev.Key, "event", ev.Name)
	}
}

// sequence returns a sequencer greater than every one before: the event's
// time in nanoseconds, or one more than the last when the clock has not
// moved past it.
func (n *Notifier) sequence(t time.Time) uint64 {
	want := uint64(t.UnixNano())
	for {
		last := n.seq.Load()
		next := max(want, last+1)
		if n.seq.CompareAndSwap(last, next) {
			return next
		}
	}
}

// Close stops taking events and waits, bounded by ctx, until every queued
// one is sent or given up. Events still queued when ctx ends are dropped
// (counted, and reported in the error). Idempotent.
func (n *Notifier) Close(ctx context.Context) error {
	n.mu.Lock()
	if !n.closed {
		n.closed = true
		close(n.queue) // the sender drains it, then exits
	}
	n.mu.Unlock()
	select {
	case <-n.done:
	case <-ctx.Done():
		n.stop()
		<-n.done
	}
	if lost := n.lost.Load(); lost > 0 {
		return fmt.Errorf("notify: %d events not delivered before the deadline: %w", lost, ctx.Err())
	}
	return nil
}

// run sends queued events in order until the queue is closed and empty.
// Once ctx ends (Close gave up), what is left is dropped.
func (n *Notifier) run(ctx context.Context) {
	defer close(n.done)
	left := 0
	for q := range n.queue {
		if ctx.Err() != nil {
			left++
			continue
		}
		n.send(ctx, q)
	}
	if left > 0 {
		n.lost.Add(int64(left))
		n.events.WithLabelValues("dropped").Add(float64(left))
		n.log.Warn("notifications dropped at shutdown", "events", left)
	}
}

// send posts one event, retrying what may pass for up to RetryFor.
func (n *Notifier) send(ctx context.Context, q queued) {
	body, err := json.Marshal(n.message(q))
	if err != nil { // cannot happen: plain strings and numbers
		n.events.WithLabelValues("failed").Inc()
		n.log.Error("notification not encodable", "err", err)
		return
	}
	deadline := time.Now().Add(n.cfg.RetryFor)
	wait := n.cfg.Backoff
	for attempt := 1; ; attempt++ {
		retry, err := n.post(ctx, body)
		if err == nil {
			n.events.WithLabelValues("sent").Inc()
			return
		}
		if !retry || ctx.Err() != nil || time.Now().Add(wait).After(deadline) {
			result := "failed"
			if ctx.Err() != nil {
				result = "dropped" // Close gave up on it
				n.lost.Add(1)
			}
			n.events.WithLabelValues(result).Inc()
			n.log.Warn("notification not delivered, dropped", "bucket", q.ev.Bucket, "key", q.ev.Key,
				"event", q.ev.Name, "attempts", attempt, "err", err)
			return
		}
		n.log.Debug("notification failed, retrying", "bucket", q.ev.Bucket, "key", q.ev.Key,
			"attempt", attempt, "backoff", wait, "err", err)
		// Jitter keeps cachelets that lost the same controller apart.
		t := time.NewTimer(wait/2 + rand.N(wait/2+1))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
		wait = min(2*wait, maxBackoff)
	}
}

// post sends body once. retry says whether a failure may pass.
func (n *Notifier) post(ctx context.Context, body []byte) (retry bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, n.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, n.cfg.URL, bytes.NewReader(body))
	if err != nil {
		return false, err
	}
	req.Header.Set("Content-Type", "application/json")
	if n.cfg.Token != "" {
		req.Header.Set("Authorization", "Bearer "+n.cfg.Token)
	}
	resp, err := n.cfg.Client.Do(req)
	if err != nil {
		return true, err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)) // keeps the connection
	resp.Body.Close()
	switch s := resp.StatusCode; {
	case s >= 200 && s < 300:
		return false, nil
	case s >= 500, s == http.StatusRequestTimeout, s == http.StatusTooManyRequests:
		return true, fmt.Errorf("answered %d", s)
	default:
		return false, fmt.Errorf("answered %d", s)
	}
}

// message builds the document posted for one event.
func (n *Notifier) message(q queued) Message {
	ev := q.ev
	return Message{
		Records: []Record{{
			EventVersion:      "2.1",
			EventSource:       Source,
			AWSRegion:         ev.Region,
			EventTime:         ev.Time.UTC().Format(time.RFC3339Nano),
			EventName:         ev.Name,
			UserIdentity:      UserIdentity{PrincipalID: ev.Principal},
			RequestParameters: RequestParameters{SourceIPAddress: ev.SourceIP},
			ResponseElements:  ResponseElements{RequestID: ev.RequestID},
			S3: S3Entity{
				SchemaVersion:   "1.0",
				ConfigurationID: "hoard",
				Bucket:          BucketEntity{Name: ev.Bucket, ARN: "arn:aws:s3:::" + ev.Bucket},
				Object: ObjectEntity{
					Key:       EncodeKey(ev.Key),
					Size:      ev.Size,
					ETag:      strings.Trim(ev.ETag, `"`),
					Sequencer: fmt.Sprintf("%016X", q.seq),
				},
			},
		}},
		Hoard: Origin{App: n.cfg.App, Cachelet: n.cfg.Cachelet, Media: ev.Media},
	}
}
