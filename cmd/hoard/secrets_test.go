package main

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSecretsFile(t *testing.T) {
	write := func(t *testing.T, body string, mode os.FileMode) string {
		p := filepath.Join(t.TempDir(), "secrets.json")
		if err := os.WriteFile(p, []byte(body), mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct {
		name      string
		body      string
		mode      os.FileMode
		args      []string
		wantToken string
		wantKey   string
		wantErr   string
	}{
		{"file fills the flags", `{"token": "from-file", "store-secret-key": "sk"}`, 0o600, nil, "from-file", "sk", ""},
		{"the command line wins", `{"token": "from-file"}`, 0o600, []string{"--token", "from-flag"}, "from-flag", "", ""},
		{"readable by others", `{"token": "x"}`, 0o644, nil, "", "", "readable by its owner only"},
		{"unknown key", `{"password": "x"}`, 0o600, nil, "", "", `unknown key "password"`},
		{"not JSON", `token: x`, 0o600, nil, "", "", "secrets.json"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := flag.NewFlagSet("t", flag.ContinueOnError)
			token := fs.String("token", "", "")
			key := fs.String("store-secret-key", "", "")
			apply := secretsFlag(fs, "token", "store-secret-key")
			args := append([]string{"--secrets", write(t, tc.body, tc.mode)}, tc.args...)
			if err := fs.Parse(args); err != nil {
				t.Fatal(err)
			}
			err := apply()
			if tc.wantErr != "" {
				if err == nil || !errors.Is(err, errUsage) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v; want a usage error naming %q", err, tc.wantErr)
				}
				if *token != "" || *key != "" {
					t.Fatalf("a refused file set flags: token %q key %q", *token, *key)
				}
				return
			}
			if err != nil || *token != tc.wantToken || *key != tc.wantKey {
				t.Fatalf("token %q key %q err %v; want %q %q", *token, *key, err, tc.wantToken, tc.wantKey)
			}
		})
	}
}
