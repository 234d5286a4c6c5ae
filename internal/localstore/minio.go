package localstore

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"github.com/hoard-io/hoard/internal/pki"
)

// StartMinIO runs `minio server` on cfg.DataDir and returns once
// /minio/health/ready answers 200, or fails when ctx ends first. ctx bounds
// only the start-up: the server runs until Close.
//
// The process is kept offline and quiet: no browser, no update checks, no
// call-home, and an empty certificate directory of its own so that a
// ~/.minio/certs on the machine cannot turn TLS on behind hoard's back.
// Inherited MINIO_* variables are dropped for the same reason.
func StartMinIO(ctx context.Context, cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults(MinIOBinary)
	bin := cfg.Binary
	if bin == "" {
		var err error
		if bin, err = FindBinary(MinIOBinary); err != nil {
			return nil, err
		}
	}
	addr, err := resolveAddr(cfg.Addr)
	if err != nil {
		return nil, err
	}
	console := cfg.ConsoleAddr
	if console == "" {
		console = "127.0.0.1:0"
	}
	if console, err = resolveAddr(console); err != nil {
		return nil, err
	}
	certs := filepath.Join(filepath.Dir(filepath.Clean(cfg.DataDir)), "minio-certs")
	if err := os.RemoveAll(certs); err != nil {
		return nil, fmt.Errorf("localstore: clear certs dir: %w", err)
	}
	if err := os.MkdirAll(certs, 0o700); err != nil {
		return nil, fmt.Errorf("localstore: create certs dir: %w", err)
	}
	endpoint := endpointFor(addr)
	readyTLS, err := minioCerts(certs, cfg.TLS)
	if err != nil {
		return nil, err
	}
	if cfg.TLS.Cert != "" {
		endpoint = "https://" + strings.TrimPrefix(endpoint, "http://")
	}
	sp := spec{
		name: MinIOBinary,
		args: []string{"server", cfg.DataDir,
			"--address", addr,
			"--console-address", console,
			"--certs-dir", certs,
			"--quiet",
		},
		env: []string{
			"MINIO_ROOT_USER=" + cfg.AccessKey,
			"MINIO_ROOT_PASSWORD=" + cfg.SecretKey,
			"MINIO_BROWSER=off",
			"MINIO_UPDATE=off",
			"MINIO_CALLHOME_ENABLE=off",
			"MINIO_SCANNER_SPEED=slowest",
			// Single-drive dev setups are refused on some filesystems
			// without this; it also silences interactive prompts.
			"MINIO_CI_CD=on",
		},
		scrubEnv: []string{"MINIO_"},
		ready:    minioReady,
		tls:      readyTLS,
	}
	sp.env = append(sp.env, cfg.Env...)
	return start(ctx, cfg, bin, endpoint, sp)
}

// minioCerts lays out MinIO's certificate directory (made empty by the
// caller) as MinIO reads it: public.crt and private.key (0600) to serve
// TLS, CAs/ for the bundles it trusts. It returns the readiness check's
// TLS: nil without a CA.
func minioCerts(dir string, f pki.Files) (*tls.Config, error) {
	if (f.Cert == "") != (f.Key == "") {
		return nil, errors.New("localstore: TLS needs both a certificate and a key")
	}
	cp := func(from, to string, mode os.FileMode) error {
		b, err := os.ReadFile(from)
		if err != nil {
			return fmt.Errorf("localstore: %w", err)
		}
		if err := os.WriteFile(to, b, mode); err != nil {
			return fmt.Errorf("localstore: %w", err)
		}
		return nil
	}
	if f.Cert != "" {
		if err := cp(f.Cert, filepath.Join(dir, "public.crt"), 0o644); err != nil {
			return nil, err
		}
		if err := cp(f.Key, filepath.Join(dir, "private.key"), 0o600); err != nil {
			return nil, err
		}
	}
	if f.CA == "" {
		return nil, nil
	}
	if err := os.MkdirAll(filepath.Join(dir, "CAs"), 0o700); err != nil {
		return nil, fmt.Errorf("localstore: %w", err)
	}
	if err := cp(f.CA, filepath.Join(dir, "CAs", "ca.crt"), 0o644); err != nil {
		return nil, err
	}
	return pki.ClientConfig(pki.Files{CA: f.CA}, nil)
}

// minioReady asks MinIO's readiness endpoint, which answers 200 once the
// object layer is initialised, and then the S3 API itself: right after
// start-up the readiness endpoint can answer 200 while S3 calls still get
// 503 (XMinioServerNotInitialized, IAM still loading). An unsigned
// ListBuckets answered with anything but a 5xx (403 when working) means
// the S3 API serves.
func minioReady(ctx context.Context, client *http.Client, endpoint string) bool {
	for _, path := range []string{"/minio/health/ready", "/"} {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, endpoint+path, nil)
		if err != nil {
			return false
		}
		resp, err := client.Do(req)
		if err != nil {
			return false
		}
		resp.Body.Close()
		if path != "/" && resp.StatusCode != http.StatusOK || resp.StatusCode >= 500 {
			return false
		}
	}
	return true
}
