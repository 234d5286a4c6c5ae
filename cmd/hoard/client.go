package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"github.com/hoard-io/hoard/internal/api"
)

// clientFlags registers the flags that name a controller and returns
// what makes its client: --controller/--token, else
// HOARD_CONTROLLER_URL/HOARD_CONTROLLER_TOKEN, else the env file of a
// `hoard up` in --dir. hc nil: a client of its own.
func clientFlags(fs *flag.FlagSet) func(hc *http.Client) (*api.ControllerClient, error) {
	url := fs.String("controller", "", "the controller's URL (default: env HOARD_CONTROLLER_URL, else .hoard/env)")
	token := fs.String("token", "", "the controller's token (default: env HOARD_CONTROLLER_TOKEN, else .hoard/env)")
	dir := fs.String("dir", ".hoard", "the state directory of `hoard up`, whose env file names the controller")
	return func(hc *http.Client) (*api.ControllerClient, error) {
		u, t := *url, *token
		if u == "" {
			u = os.Getenv("HOARD_CONTROLLER_URL")
		}
		if t == "" {
			t = os.Getenv("HOARD_CONTROLLER_TOKEN")
		}
		if u == "" || t == "" {
			env, err := readEnvFile(filepath.Join(*dir, envFile))
			if err != nil {
				return nil, fmt.Errorf("no controller given (--controller, HOARD_CONTROLLER_URL) and no running `hoard up` in %s: %v", *dir, err)
			}
			if u == "" {
				u = env["HOARD_CONTROLLER_URL"]
			}
			if t == "" {
				t = env["HOARD_CONTROLLER_TOKEN"]
			}
		}
		if u == "" {
			return nil, errors.New("the env file names no controller (HOARD_CONTROLLER_URL)")
		}
		return api.NewControllerClient(u, t, hc), nil
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
