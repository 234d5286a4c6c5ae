package bench

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/hoard-io/hoard/internal/changerelay"
	"github.com/hoard-io/hoard/internal/controller"
	s3store "github.com/hoard-io/hoard/internal/store/s3"
)

// changeRelay is `hoard bench changes --feed relay`'s stand-in for the
// controller's part of ADR 33: MinIO's webhook posts to its
// /v1/events (events token), its changerelay.Hub probes the bucket and
// serves /v1/changes (the application's token) to the owner cachelet's
// changerelay.Client. The controller's grant check is not measured: one
// application, one bucket.
type changeRelay struct {
	hub       *changerelay.Hub
	srv       *http.Server
	url       string
	eventsTok string
	appTok    string
}

// newChangeRelay listens on loopback; serve starts it once MinIO (which
// its probes write to) is up.
func newChangeRelay() (*changeRelay, net.Listener, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, err
	}
	return &changeRelay{url: "http://" + ln.Addr().String(), eventsTok: randToken(), appTok: randToken()}, ln, nil
}

// webhookEnv points a MinIO's webhook target at the relay, sending at
// once (no on-disk queue).
func (r *changeRelay) webhookEnv() []string {
	id := controller.MinIOWebhookID
	return []string{
		"MINIO_NOTIFY_WEBHOOK_ENABLE_" + id + "=on",
		"MINIO_NOTIFY_WEBHOOK_ENDPOINT_" + id + "=" + r.url + "/v1/events",
		"MINIO_NOTIFY_WEBHOOK_AUTH_TOKEN_" + id + "=" + r.eventsTok,
	}
}

// The feeds of ChangesConfig.Feed.
const (
	FeedListen = "listen"
	FeedRelay  = "relay"
)

// start has the MinIO at endpoint notify bucket's changes to the relay,
// and serves the relay on ln, its probes written with the MinIO's keys.
func (r *changeRelay) start(ctx context.Context, ln net.Listener, endpoint, key, secret, bucket string, log *slog.Logger) error {
	root, err := s3store.New(s3store.Config{Endpoint: endpoint, AccessKey: key, SecretKey: secret, Region: benchRegion}, log)
	if err != nil {
		return err
	}
	n, err := controller.NewMinIONotifier(endpoint, key, secret, benchRegion, nil)
	if err != nil {
		return err
	}
	if err := n.EnableNotifications(ctx, bucket); err != nil {
		return fmt.Errorf("bench changes: the bucket's notifications: %w", err)
	}
	r.hub, err = changerelay.New(changerelay.Config{Prober: root, Logger: log})
	if err != nil {
		return err
	}
	bearer := func(req *http.Request, tok string) bool {
		return subtle.ConstantTimeCompare([]byte(req.Header.Get("Authorization")), []byte("Bearer "+tok)) == 1
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/events", func(w http.ResponseWriter, req *http.Request) {
		if !bearer(req, r.eventsTok) {
			http.Error(w, "wrong token", http.StatusUnauthorized)
			return
		}
		var ev struct {
			Records []json.RawMessage `json:"Records"`
		}
		if err := json.NewDecoder(io.LimitReader(req.Body, 1<<20)).Decode(&ev); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.hub.Publish(changerelay.Changes(ev.Records))
	})
	mux.HandleFunc("GET /v1/changes", func(w http.ResponseWriter, req *http.Request) {
		if !bearer(req, r.appTok) {
			http.Error(w, "wrong token", http.StatusUnauthorized)
			return
		}
		hb, err := time.ParseDuration(req.URL.Query().Get("heartbeat"))
		if err != nil || hb < 3*time.Second {
			hb = 6 * time.Second
		}
		s, err := r.hub.Subscribe("bench", req.URL.Query().Get("bucket"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		defer r.hub.Unsubscribe(s)
		r.hub.Serve(w, req, s, hb/3)
	})
	r.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = r.srv.Serve(ln) }()
	return nil
}

func (r *changeRelay) client() *changerelay.Client {
	return &changerelay.Client{URL: r.url, Token: r.appTok}
}

func (r *changeRelay) close() {
	if r.hub != nil {
		r.hub.Close()
	}
	if r.srv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := r.srv.Shutdown(ctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
			_ = r.srv.Close()
		}
	}
}

func randToken() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
