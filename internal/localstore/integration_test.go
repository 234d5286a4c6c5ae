//go:build integration

package localstore

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestServers(t *testing.T) {
	starts := []struct {
		name  string
		start func(context.Context, Config) (*Server, error)
	}{
		{MinIOBinary, StartMinIO},
		{VersitygwBinary, StartVersitygw},
	}
	for _, tc := range starts {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			srv, err := tc.start(ctx, Config{DataDir: filepath.Join(dir, "data"), Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			resp, err := http.Get(srv.Endpoint() + "/")
			if err != nil {
				t.Fatalf("GET %s: %v", srv.Endpoint(), err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusForbidden {
				t.Errorf("unsigned GET / = %d, want 403", resp.StatusCode)
			}
			if _, err := os.Stat(srv.LogPath()); err != nil {
				t.Errorf("log file: %v", err)
			}
			start := time.Now()
			if err := srv.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			if d := time.Since(start); d > DefaultGracePeriod {
				t.Errorf("Close took %v: SIGTERM ignored", d)
			}
			if err := srv.Close(); err != nil {
				t.Errorf("second Close: %v", err)
			}
			if _, err := http.Get(srv.Endpoint() + "/"); err == nil {
				t.Errorf("server still answers after Close")
			}
		})
	}
}

func TestStartFailsFast(t *testing.T) {
	dir := t.TempDir()
	// A "server" that exits at once must fail Start with ErrExited,
	// not hang until the context ends.
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	_, err := StartMinIO(ctx, Config{Binary: "/bin/false", DataDir: filepath.Join(dir, "data")})
	if !errors.Is(err, ErrExited) {
		t.Fatalf("Start(/bin/false) = %v, want ErrExited", err)
	}
}
