package localstore

import (
	"context"
	"net/http"
)

// StartVersitygw runs versitygw's posix gateway on cfg.DataDir:
//
//	versitygw --access AK --secret SK --port ADDR --region us-east-1 --quiet posix DIR
//
// and returns once the S3 port answers, or fails when ctx ends first. ctx
// bounds only the start-up. The posix backend keeps metadata in extended
// attributes, so DataDir must be on a filesystem that supports them (ext4,
// xfs, btrfs and tmpfs do).
func StartVersitygw(ctx context.Context, cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults(VersitygwBinary)
	bin := cfg.Binary
	if bin == "" {
		var err error
		if bin, err = FindBinary(VersitygwBinary); err != nil {
			return nil, err
		}
	}
	addr, err := resolveAddr(cfg.Addr)
	if err != nil {
		return nil, err
	}
	sp := spec{
		name: VersitygwBinary,
		// Credentials go on the command line rather than in the
		// environment: versitygw reads several variable names for each
		// and the flags leave no doubt which wins. The servers are
		// loopback-only development stores.
		args: []string{
			"--access", cfg.AccessKey,
			"--secret", cfg.SecretKey,
			"--port", addr,
			"--region", "us-east-1",
			"--quiet",
			"posix", cfg.DataDir,
		},
		// versitygw reads its settings from these variables too; an
		// inherited one (VGW_CERT, say) would change what we start.
		scrubEnv: []string{"VGW_", "ROOT_ACCESS_KEY", "ROOT_SECRET", "LOGFILE", "WEBHOOK"},
		ready:    s3Ready,
	}
	return start(ctx, cfg, bin, endpointFor(addr), sp)
}

// s3Ready reports whether an S3 front end answers at endpoint. The request
// is unsigned, so a serving gateway answers 403 AccessDenied; any answer
// below 500 means the S3 handler is up (versitygw has no readiness endpoint
// unless one is configured, and a configured path would shadow a bucket of
// the same name).
func s3Ready(ctx context.Context, client *http.Client, endpoint string) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, endpoint+"/", nil)
	if err != nil {
		return false
	}
	resp, err := client.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode < 500
}
