package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/hoard-io/hoard/internal/api"
	"github.com/hoard-io/hoard/internal/appspec"
	"github.com/hoard-io/hoard/internal/bytesize"
	"github.com/hoard-io/hoard/internal/rig"
)

// runController runs the platform's controller on its own.
func runController(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("controller", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg rig.Config
	var listen, etcd, logLevel string
	fs.StringVar(&listen, "listen", "127.0.0.1:9100", "the controller's API address")
	fs.StringVar(&etcd, "etcd-endpoints", envDefault("HOARD_ETCD_ENDPOINTS", ""), "comma-separated etcd client URLs (env HOARD_ETCD_ENDPOINTS)")
	storeFlags(fs, &cfg)
	fs.StringVar(&cfg.ControllerToken, "token", envDefault("HOARD_CONTROLLER_TOKEN", ""), "bearer token clients must send (env HOARD_CONTROLLER_TOKEN)")
	fs.StringVar(&cfg.AgentToken, "agent-token", envDefault("HOARD_AGENT_TOKEN", ""), "bearer token the agents expect (env HOARD_AGENT_TOKEN)")
	fs.BoolVar(&cfg.StoreNotifications, "store-notifications", false, "the store is a MinIO with hoard's webhook target: configure bucket notifications for object triggers")
	fs.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	if err := usageErr(fs.Parse(args)); err != nil {
		return err
	}
	cfg.EtcdEndpoints = splitList(etcd)
	if len(cfg.EtcdEndpoints) == 0 || cfg.StoreEndpoint == "" || len(cfg.ControllerToken) < 16 || len(cfg.AgentToken) < 16 {
		return fmt.Errorf("%w: --etcd-endpoints, --store-endpoint, and tokens of at least 16 bytes are required", errUsage)
	}
	log, err := newLogger(stderr, logLevel, false)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	cfg.Controller, cfg.ControllerListener = true, ln
	p, err := rig.Start(ctx, cfg, log)
	if err != nil {
		ln.Close()
		return err
	}
	fmt.Fprintf(stdout, "hoard controller serving at %s\n", p.ControllerURL)
	<-ctx.Done()
	p.Close()
	return nil
}

// runAgent runs a node agent on its own.
func runAgent(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg rig.Config
	var etcd, logLevel string
	fs.StringVar(&cfg.AgentListen, "listen", "127.0.0.1:0", "the agent's API address")
	fs.StringVar(&cfg.AgentID, "id", "", "the agent's name (default agent-<hostname>)")
	fs.StringVar(&cfg.AgentPeerHost, "peer-host", "127.0.0.1", "the address its cachelets take peer traffic on (the node's address when cachelets on other nodes must reach them)")
	fs.StringVar(&cfg.Dir, "dir", ".hoard", "working directory: code, instance logs")
	fs.StringVar(&etcd, "etcd-endpoints", envDefault("HOARD_ETCD_ENDPOINTS", ""), "comma-separated etcd client URLs (env HOARD_ETCD_ENDPOINTS)")
	storeFlags(fs, &cfg)
	fs.StringVar(&cfg.ControllerURL, "controller", envDefault("HOARD_CONTROLLER_URL", ""), "the controller's URL, for cache triggers (env HOARD_CONTROLLER_URL)")
	fs.StringVar(&cfg.ControllerToken, "controller-token", envDefault("HOARD_CONTROLLER_TOKEN", ""), "the controller's token, for cache triggers (env HOARD_CONTROLLER_TOKEN)")
	fs.StringVar(&cfg.AgentToken, "token", envDefault("HOARD_AGENT_TOKEN", ""), "bearer token the controller sends (env HOARD_AGENT_TOKEN)")
	fs.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	if err := usageErr(fs.Parse(args)); err != nil {
		return err
	}
	cfg.EtcdEndpoints = splitList(etcd)
	if len(cfg.EtcdEndpoints) == 0 || cfg.StoreEndpoint == "" || len(cfg.AgentToken) < 16 {
		return fmt.Errorf("%w: --etcd-endpoints, --store-endpoint and a --token of at least 16 bytes are required", errUsage)
	}
	log, err := newLogger(stderr, logLevel, false)
	if err != nil {
		return err
	}
	cfg.Agent = true
	p, err := rig.Start(ctx, cfg, log)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "hoard agent %s serving at %s (sandboxes: %s)\n", p.Agent.ID(), p.AgentURL, p.Agent.SandboxMode())
	<-ctx.Done()
	p.Close()
	return nil
}

func storeFlags(fs *flag.FlagSet, cfg *rig.Config) {
	fs.StringVar(&cfg.StoreEndpoint, "store-endpoint", envDefault("HOARD_STORE_ENDPOINT", ""), "the store's S3 endpoint URL (env HOARD_STORE_ENDPOINT)")
	fs.StringVar(&cfg.StoreAccessKey, "store-access-key", envDefault("HOARD_STORE_ACCESS_KEY", ""), "the store's access key (env HOARD_STORE_ACCESS_KEY)")
	fs.StringVar(&cfg.StoreSecretKey, "store-secret-key", envDefault("HOARD_STORE_SECRET_KEY", ""), "the store's secret key (env HOARD_STORE_SECRET_KEY)")
	fs.StringVar(&cfg.Region, "region", "us-east-1", "region")
}

// apiClient talks to a controller: --controller/--token, else
// HOARD_CONTROLLER_URL/HOARD_CONTROLLER_TOKEN, else the env file of a
// `hoard up` in --dir.
type apiClient struct {
	url, token string
	http       *http.Client
}

func clientFlags(fs *flag.FlagSet) func() (*apiClient, error) {
	url := fs.String("controller", "", "the controller's URL (default: env HOARD_CONTROLLER_URL, else .hoard/env)")
	token := fs.String("token", "", "the controller's token (default: env HOARD_CONTROLLER_TOKEN, else .hoard/env)")
	dir := fs.String("dir", ".hoard", "the state directory of `hoard up`, whose env file names the controller")
	return func() (*apiClient, error) {
		c := &apiClient{url: *url, token: *token, http: &http.Client{}}
		if c.url == "" {
			c.url = os.Getenv("HOARD_CONTROLLER_URL")
		}
		if c.token == "" {
			c.token = os.Getenv("HOARD_CONTROLLER_TOKEN")
		}
		if c.url == "" || c.token == "" {
			env, err := readEnvFile(filepath.Join(*dir, envFile))
			if err != nil {
				return nil, fmt.Errorf("no controller given (--controller, HOARD_CONTROLLER_URL) and no running `hoard up` in %s: %v", *dir, err)
			}
			if c.url == "" {
				c.url = env["HOARD_CONTROLLER_URL"]
			}
			if c.token == "" {
				c.token = env["HOARD_CONTROLLER_TOKEN"]
			}
		}
		if c.url == "" {
			return nil, errors.New("the env file names no controller (HOARD_CONTROLLER_URL)")
		}
		c.url = strings.TrimSuffix(c.url, "/")
		return c, nil
	}
}

func readEnvFile(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok {
			out[k] = v
		}
	}
	return out, sc.Err()
}

// call sends a request and decodes a JSON answer; an error status becomes
// the error the controller gave.
func (c *apiClient) call(ctx context.Context, method, path, contentType string, body []byte, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, c.url+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("the controller at %s: %w", c.url, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode >= 300 {
		var e struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(data, &e) != nil || e.Error == "" {
			e.Error = strings.TrimSpace(string(data))
		}
		return fmt.Errorf("%s (%s)", e.Error, resp.Status)
	}
	if out != nil && len(data) > 0 {
		return json.Unmarshal(data, out)
	}
	return nil
}

// runDeploy packs an application directory and deploys it.
func runDeploy(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("deploy", flag.ContinueOnError)
	fs.SetOutput(stderr)
	client := clientFlags(fs)
	if err := usageErr(fs.Parse(args)); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return fmt.Errorf("%w: hoard deploy DIR [DIR...]", errUsage)
	}
	c, err := client()
	if err != nil {
		return err
	}
	for _, dir := range fs.Args() {
		pkg, err := appspec.Pack(dir)
		if err != nil {
			return err
		}
		var info api.AppInfo
		if err := c.call(ctx, http.MethodPost, "/v1/apps", "application/gzip", pkg.Data, &info); err != nil {
			return fmt.Errorf("deploying %s: %w", dir, err)
		}
		fmt.Fprintf(stdout, "deployed %s version %d (%s, %s): functions %s", info.Name, info.Version, info.Rev[:12],
			bytesize.Format(int64(len(pkg.Data))), strings.Join(info.Functions, ", "))
		if len(info.Pipelines) > 0 {
			fmt.Fprintf(stdout, "; pipelines %s", strings.Join(info.Pipelines, ", "))
		}
		fmt.Fprintln(stdout)
	}
	return nil
}

// runInvoke invokes a function (or runs a pipeline) and prints its result.
func runInvoke(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("invoke", flag.ContinueOnError)
	fs.SetOutput(stderr)
	client := clientFlags(fs)
	data := fs.String("data", "{}", "the event as JSON, or @FILE")
	pipeline := fs.Bool("pipeline", false, "FUNCTION names a pipeline: run it")
	showLog := fs.Bool("log", false, "print the function's log to stderr")
	if err := usageErr(fs.Parse(reorder(args, map[string]bool{"pipeline": true, "log": true}))); err != nil {
		return err
	}
	if fs.NArg() != 2 {
		return fmt.Errorf("%w: hoard invoke [flags] APP FUNCTION (or --pipeline APP PIPELINE)", errUsage)
	}
	event := []byte(*data)
	if strings.HasPrefix(*data, "@") {
		b, err := os.ReadFile((*data)[1:])
		if err != nil {
			return err
		}
		event = b
	}
	if !json.Valid(event) {
		return fmt.Errorf("%w: --data is not valid JSON", errUsage)
	}
	c, err := client()
	if err != nil {
		return err
	}
	app, name := fs.Arg(0), fs.Arg(1)
	if *pipeline {
		var run api.PipelineRun
		if err := c.call(ctx, http.MethodPost, "/v1/apps/"+app+"/pipelines/"+name+"/run", "application/json", event, &run); err != nil {
			return err
		}
		out, _ := json.MarshalIndent(run, "", "  ")
		fmt.Fprintln(stdout, string(out))
		if !run.OK {
			return fmt.Errorf("pipeline %s failed: %s", name, run.Error)
		}
		return nil
	}
	var rec api.Invocation
	if err := c.call(ctx, http.MethodPost, "/v1/apps/"+app+"/functions/"+name+"/invoke", "application/json", event, &rec); err != nil {
		return err
	}
	if *showLog || !rec.OK {
		fmt.Fprint(stderr, rec.Log)
	}
	start := "warm"
	if rec.Cold {
		start = "cold"
	}
	fmt.Fprintf(stderr, "request %s on %s: %s start, %.1f ms (function %.1f ms)\n", rec.RequestID, rec.Instance, start, rec.TotalMS, rec.ExecMS)
	if !rec.OK {
		if rec.Error.Traceback != "" {
			fmt.Fprint(stderr, rec.Error.Traceback)
		}
		return fmt.Errorf("%s: %s", rec.Error.Type, rec.Error.Message)
	}
	fmt.Fprintln(stdout, string(rec.Result))
	return nil
}

// reorder moves flags after positional arguments to the front, so that
// `hoard invoke APP FN --data {}` works as well as the flag-first form.
// bools names the flags that take no value.
func reorder(args []string, bools map[string]bool) []string {
	var flags, pos []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			pos = append(pos, args[i+1:]...)
			break
		}
		if strings.HasPrefix(a, "-") && len(a) > 1 {
			flags = append(flags, a)
			name := strings.TrimLeft(a, "-")
			if !strings.Contains(name, "=") && !bools[name] && i+1 < len(args) {
				i++
				flags = append(flags, args[i])
			}
			continue
		}
		pos = append(pos, a)
	}
	return append(flags, pos...)
}

// runApps lists the deployed applications.
func runApps(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("apps", flag.ContinueOnError)
	fs.SetOutput(stderr)
	client := clientFlags(fs)
	asJSON := fs.Bool("json", false, "print JSON")
	if err := usageErr(fs.Parse(args)); err != nil {
		return err
	}
	c, err := client()
	if err != nil {
		return err
	}
	var apps []api.AppInfo
	if err := c.call(ctx, http.MethodGet, "/v1/apps", "", nil, &apps); err != nil {
		return err
	}
	if *asJSON {
		out, _ := json.MarshalIndent(apps, "", "  ")
		fmt.Fprintln(stdout, string(out))
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "APP\tVERSION\tFUNCTIONS\tPIPELINES\tTRIGGERS\tINSTANCES\tINVOCATIONS\tDEPLOYED")
	for _, a := range apps {
		busy := 0
		for _, in := range a.Instances {
			if in.State == "busy" {
				busy++
			}
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%d\t%d (%d busy)\t%d\t%s\n", a.Name, a.Version, strings.Join(a.Functions, ","),
			strings.Join(a.Pipelines, ","), a.Triggers, len(a.Instances), busy, a.Invocations, a.DeployedAt.Local().Format(time.DateTime))
	}
	return tw.Flush()
}

// runLogs prints an application's recent invocations with their logs.
func runLogs(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("logs", flag.ContinueOnError)
	fs.SetOutput(stderr)
	client := clientFlags(fs)
	function := fs.String("function", "", "only this function")
	n := fs.Int("n", 10, "how many invocations")
	onlyErrors := fs.Bool("errors", false, "only failed invocations")
	if err := usageErr(fs.Parse(reorder(args, map[string]bool{"errors": true}))); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return fmt.Errorf("%w: hoard logs [flags] APP", errUsage)
	}
	c, err := client()
	if err != nil {
		return err
	}
	q := fmt.Sprintf("/v1/apps/%s/logs?n=%d&function=%s", fs.Arg(0), *n, *function)
	if *onlyErrors {
		q += "&errors=1"
	}
	var recs []api.Invocation
	if err := c.call(ctx, http.MethodGet, q, "", nil, &recs); err != nil {
		return err
	}
	for _, r := range recs {
		status := "ok"
		if !r.OK {
			status = r.Error.Type + ": " + r.Error.Message
		}
		start := "warm"
		if r.Cold {
			start = "cold"
		}
		var reads []string
		for k, v := range r.Reads {
			reads = append(reads, fmt.Sprintf("%s %d (%s)", k, v.Count, bytesize.Human(v.Bytes)))
		}
		sort.Strings(reads)
		fmt.Fprintf(stdout, "=== %s %s/%s on %s, %s, %s start, %.1f ms, reads: %s\n%s", r.Start.Local().Format(time.RFC3339), r.App, r.Function,
			r.Instance, status, start, r.TotalMS, strings.Join(reads, ", "), r.Log)
		if r.Log != "" && !strings.HasSuffix(r.Log, "\n") {
			fmt.Fprintln(stdout)
		}
	}
	return nil
}
