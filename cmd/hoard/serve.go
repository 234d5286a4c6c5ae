package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/hoard-io/hoard/internal/instance"
)

// runServe runs one cachelet in front of an existing S3 endpoint until the
// context ends. Secrets may come from the environment so they stay out of
// process listings: HOARD_SECRET_KEY, HOARD_STORE_SECRET_KEY.
func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg instance.Config
	var cf cacheFlags
	var logLevel, domains string
	var logJSON bool
	fs.StringVar(&cfg.Listen, "listen", "127.0.0.1:9200", "S3 endpoint address")
	fs.StringVar(&cfg.MetricsListen, "metrics-listen", "127.0.0.1:9201", "Prometheus /metrics address, or off")
	fs.StringVar(&cfg.Region, "region", envDefault("HOARD_REGION", "us-east-1"), "region clients sign for")
	fs.StringVar(&cfg.AccessKey, "access-key", envDefault("HOARD_ACCESS_KEY", ""), "access key clients sign with (env HOARD_ACCESS_KEY)")
	fs.StringVar(&cfg.SecretKey, "secret-key", envDefault("HOARD_SECRET_KEY", ""), "secret key clients sign with (env HOARD_SECRET_KEY)")
	fs.StringVar(&cfg.Store.Endpoint, "store-endpoint", envDefault("HOARD_STORE_ENDPOINT", ""), "the store's S3 endpoint URL (env HOARD_STORE_ENDPOINT)")
	fs.StringVar(&cfg.Store.AccessKey, "store-access-key", envDefault("HOARD_STORE_ACCESS_KEY", ""), "the store's access key (env HOARD_STORE_ACCESS_KEY)")
	fs.StringVar(&cfg.Store.SecretKey, "store-secret-key", envDefault("HOARD_STORE_SECRET_KEY", ""), "the store's secret key (env HOARD_STORE_SECRET_KEY)")
	fs.StringVar(&cfg.Store.Region, "store-region", "", "region the store signs for (default: --region)")
	fs.StringVar(&domains, "domains", "", "comma-separated base domains for virtual-host style requests (bucket.DOMAIN)")
	fs.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	fs.BoolVar(&logJSON, "log-json", false, "log as JSON lines")
	cf.register(fs)
	if err := usageErr(fs.Parse(args)); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}
	cf.apply(&cfg)
	for _, d := range strings.Split(domains, ",") {
		if d = strings.TrimSpace(d); d != "" {
			cfg.Domains = append(cfg.Domains, strings.ToLower(d))
		}
	}
	log, err := newLogger(stderr, logLevel, logJSON)
	if err != nil {
		return err
	}
	in, err := instance.Start(ctx, cfg, log)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "hoard cachelet serving S3 at %s (metrics %s), store %s\n", in.Endpoint(), in.MetricsURL(), cfg.Store.Endpoint)
	<-ctx.Done()
	log.Info("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return in.Close(sctx)
}
