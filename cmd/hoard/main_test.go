package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func TestParseBytes(t *testing.T) {
	tests := []struct {
		in   string
		want int64
		err  bool
	}{
		{"1024", 1024, false},
		{"64MiB", 64 << 20, false},
		{"1.5GiB", 3 << 29, false},
		{"2GB", 2e9, false},
		{"512K", 512 << 10, false},
		{" 7 B ", 7, false},
		{"-1MiB", 0, true},
		{"lots", 0, true},
		{"", 0, true},
	}
	for _, tt := range tests {
		got, err := parseBytes(tt.in)
		if (err != nil) != tt.err || got != tt.want {
			t.Errorf("parseBytes(%q) = %d, %v; want %d, err=%v", tt.in, got, err, tt.want, tt.err)
		}
	}
}

func TestRunExitCodes(t *testing.T) {
	tests := []struct {
		args    []string
		code    int
		wantOut string // in stdout or stderr
	}{
		{nil, 2, "usage: hoard"},
		{[]string{"help"}, 0, "commands:"},
		{[]string{"nonsense"}, 2, `unknown command "nonsense"`},
		{[]string{"version"}, 0, "hoard "},
		{[]string{"up", "--no-such-flag"}, 2, "flag provided but not defined"},
		{[]string{"serve", "--budget", "lots"}, 2, "bad size"},
		{[]string{"serve", "extra"}, 2, "unexpected argument"},
		{[]string{"serve", "--access-key", "", "--store-endpoint", "http://127.0.0.1:1"}, 1, "access key and secret key are required"},
		{[]string{"serve", "--access-key", "a", "--secret-key", "b"}, 1, "store"},
		{[]string{"serve", "--access-key", "a", "--secret-key", "b", "--store-endpoint", "http://127.0.0.1:1", "--read-mode", "sometimes"}, 1, "unknown read mode"},
		{[]string{"serve", "--log-level", "loud"}, 2, "bad log level"},
		{[]string{"serve", "--access-key", "a", "--secret-key", "b", "--store-endpoint", "http://127.0.0.1:1", "--eviction", "lfu"}, 1, "unknown eviction policy"},
		{[]string{"serve", "--access-key", "a", "--secret-key", "b", "--store-endpoint", "http://127.0.0.1:1", "--eviction", "ttl"}, 1, "TTL"},
		{[]string{"bench", "nope"}, 2, ""},
	}
	for _, tt := range tests {
		var out, errOut bytes.Buffer
		t.Setenv("HOARD_ACCESS_KEY", "")
		t.Setenv("HOARD_SECRET_KEY", "")
		t.Setenv("HOARD_STORE_ENDPOINT", "")
		code := run(context.Background(), tt.args, &out, &errOut)
		if code != tt.code {
			t.Errorf("hoard %v: exit %d, want %d (stderr %q)", tt.args, code, tt.code, errOut.String())
			continue
		}
		if all := out.String() + errOut.String(); !strings.Contains(all, tt.wantOut) {
			t.Errorf("hoard %v: output %q does not mention %q", tt.args, all, tt.wantOut)
		}
	}
}
