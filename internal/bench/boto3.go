package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"
)

// boto3Input is what the Python script reads on stdin.
type boto3Input struct {
	Bucket  string        `json:"bucket"`
	Region  string        `json:"region"`
	Targets []boto3Target `json:"targets"`
	Objects []boto3Object `json:"objects"`
}

type boto3Target struct {
	Name      string `json:"name"`
	Endpoint  string `json:"endpoint"`
	AccessKey string `json:"access_key"`
	SecretKey string `json:"secret_key"`
	// ExpectRead, when set, is the x-hoard-read header every timed
	// response must carry.
	ExpectRead string `json:"expect_read,omitempty"`
}

type boto3Object struct {
	Key        string `json:"key"`
	Size       int64  `json:"size"`
	Warmup     int    `json:"warmup"`
	Iterations int    `json:"iterations"`
}

// boto3Output is what the script prints on stdout: per target, per size
// (as a decimal string), the p50 and every timed sample.
type boto3Output struct {
	Python  string                                `json:"python"`
	Boto3   string                                `json:"boto3"`
	Results map[string]map[string]boto3SizeResult `json:"results"`
}

type boto3SizeResult struct {
	Warmup    int     `json:"warmup"`
	P50NS     int64   `json:"p50_ns"`
	SamplesNS []int64 `json:"samples_ns"`
}

func boto3Objects(sizes []int64, quick bool) []boto3Object {
	out := make([]boto3Object, 0, len(sizes))
	for _, s := range sizes {
		p := boto3Plan(s, quick)
		out = append(out, boto3Object{Key: objectKey(s), Size: s, Warmup: p.Warmup, Iterations: p.Iterations})
	}
	return out
}

// runBoto3 runs the script and parses its answer.
func runBoto3(ctx context.Context, cfg AccessConfig, in boto3Input) (*boto3Output, error) {
	if cfg.Python == "" || cfg.Boto3Script == "" {
		return nil, errNoPython
	}
	stdin, err := json.Marshal(in)
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, cfg.Python, cfg.Boto3Script)
	cmd.Stdin = bytes.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, io.MultiWriter(cfg.Progress, &stderr)
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%s %s: %w: %s", cfg.Python, cfg.Boto3Script, err, lastLines(stderr.String(), 8))
	}
	return parseBoto3(stdout.Bytes())
}

func parseBoto3(b []byte) (*boto3Output, error) {
	var out boto3Output
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, fmt.Errorf("bench: boto3 script output: %w", err)
	}
	return &out, nil
}

// merge adds the boto3 figures to the report's sizes, summarised the same
// way as the Go targets.
func (o *boto3Output) merge(r *Report) {
	names := make([]string, 0, len(o.Results))
	for n := range o.Results {
		names = append(names, n)
	}
	slices.Sort(names)
	for i := range r.Sizes {
		s := &r.Sizes[i]
		for _, name := range names {
			res, ok := o.Results[name][strconv.FormatInt(s.Size, 10)]
			if !ok || len(res.SamplesNS) == 0 {
				continue
			}
			samples := make([]time.Duration, len(res.SamplesNS))
			for j, ns := range res.SamplesNS {
				samples[j] = time.Duration(ns)
			}
			s.Targets = append(s.Targets, TargetResult{
				Name: name, Summary: Summarize(samples, s.Size), Warmup: res.Warmup, SamplesNS: res.SamplesNS,
			})
		}
	}
	if o.Boto3 != "" {
		r.Machine.Python = strings.TrimSpace(o.Python + " boto3 " + o.Boto3)
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
