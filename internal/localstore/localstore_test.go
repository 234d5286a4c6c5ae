package localstore

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestFindBinary(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "fakestore")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	plain := filepath.Join(dir, "notexec")
	if err := os.WriteFile(plain, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		env     string // $HOARD_FAKESTORE_BIN
		path    string // $PATH
		want    string
		wantErr bool
	}{
		{"env wins", exe, "", exe, false},
		{"env not executable", plain, dir, "", true},
		{"env missing file", filepath.Join(dir, "nope"), dir, "", true},
		{"from PATH", "", dir, exe, false},
		{"nowhere", "", t.TempDir(), "", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(BinaryEnv("fakestore"), tc.env)
			t.Setenv("PATH", tc.path)
			got, err := FindBinary("fakestore")
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Fatalf("FindBinary = %q, %v; want %q (err %v)", got, err, tc.want, tc.wantErr)
			}
			if err != nil && !errors.Is(err, ErrBinaryNotFound) && tc.env == "" {
				t.Errorf("error %v does not wrap ErrBinaryNotFound", err)
			}
		})
	}
	if BinaryEnv(MinIOBinary) != "HOARD_MINIO_BIN" || BinaryEnv(VersitygwBinary) != "HOARD_VERSITYGW_BIN" {
		t.Errorf("BinaryEnv: %s %s", BinaryEnv(MinIOBinary), BinaryEnv(VersitygwBinary))
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		ok   bool
	}{
		{"minimal", Config{DataDir: "/tmp/x"}, true},
		{"full", Config{DataDir: "/tmp/x", Addr: "127.0.0.1:9000", ConsoleAddr: "127.0.0.1:0", AccessKey: "abc", SecretKey: "12345678"}, true},
		{"no data dir", Config{}, false},
		{"bad addr", Config{DataDir: "/x", Addr: "9000"}, false},
		{"bad console", Config{DataDir: "/x", ConsoleAddr: "nope"}, false},
		{"short secret", Config{DataDir: "/x", SecretKey: "short"}, false},
		{"negative grace", Config{DataDir: "/x", GracePeriod: -1}, false},
		{"wrapped", Config{DataDir: "/x", Addr: "10.0.0.2:9000", ConsoleAddr: "127.0.0.1:9001", Wrapper: []string{"ip", "netns", "exec", "n"}}, true},
		{"wrapped, free port", Config{DataDir: "/x", Addr: "10.0.0.2:0", ConsoleAddr: "127.0.0.1:9001", Wrapper: []string{"ip"}}, false},
		{"wrapped, default console", Config{DataDir: "/x", Addr: "10.0.0.2:9000", Wrapper: []string{"ip"}}, false},
	}
	for _, tc := range tests {
		if err := tc.cfg.Validate(); (err == nil) != tc.ok {
			t.Errorf("%s: Validate() = %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
	d := Config{DataDir: "/var/hoard/minio/data"}.withDefaults("minio")
	if d.LogFile != "/var/hoard/minio/minio.log" || d.Addr != DefaultAddr || d.GracePeriod != DefaultGracePeriod || d.Logger == nil {
		t.Errorf("defaults = %+v", d)
	}
}

func TestEndpointFor(t *testing.T) {
	for in, want := range map[string]string{
		"127.0.0.1:9000": "http://127.0.0.1:9000",
		":9000":          "http://127.0.0.1:9000",
		"0.0.0.0:9000":   "http://127.0.0.1:9000",
		"[::1]:9000":     "http://[::1]:9000",
		"localhost:1":    "http://localhost:1",
	} {
		if got := endpointFor(in); got != want {
			t.Errorf("endpointFor(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestResolveAddr(t *testing.T) {
	got, err := resolveAddr("127.0.0.1:0")
	if err != nil || got == "127.0.0.1:0" {
		t.Errorf("resolveAddr(:0) = %q, %v", got, err)
	}
	if got, _ := resolveAddr("127.0.0.1:9123"); got != "127.0.0.1:9123" {
		t.Errorf("resolveAddr kept port: %q", got)
	}
}

func TestScrubbedEnv(t *testing.T) {
	got := scrubbedEnv([]string{"PATH=/bin", "MINIO_ROOT_USER=x", "VGW_PORT=1", "HOME=/h"}, []string{"MINIO_", "VGW_"})
	if !slices.Equal(got, []string{"PATH=/bin", "HOME=/h"}) {
		t.Errorf("scrubbedEnv = %q", got)
	}
}
