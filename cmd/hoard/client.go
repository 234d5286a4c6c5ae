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
	"time"

	"github.com/hoard-io/hoard/internal/api"
)

// clientFlags registers the flags that name a controller and returns
// what makes its client: --controller/--token, else
// HOARD_CONTROLLER_URL/HOARD_CONTROLLER_TOKEN, else the env file of a
// `hoard up` in --dir; the same for the TLS files of an https controller
// (--tls-ca, --tls-cert, --tls-key; HOARD_TLS_CA, HOARD_TLS_CERT,
// HOARD_TLS_KEY: paths, the key a file of mode 0600). hc nil: a client of
// its own; hc's transport, when an *http.Transport, gets the TLS.
func clientFlags(fs *flag.FlagSet) func(hc *http.Client) (*api.ControllerClient, error) {
	url := fs.String("controller", "", "the controller's URL (default: env HOARD_CONTROLLER_URL, else .hoard/env)")
	token := fs.String("token", "", "the controller's token (default: env HOARD_CONTROLLER_TOKEN, else .hoard/env)")
	dir := fs.String("dir", ".hoard", "the state directory of `hoard up`, whose env file names the controller")
	var tf tlsFlags
	fs.StringVar(&tf.ca, "tls-ca", "", "with an https controller: the CA bundle its certificate chains to (default: env HOARD_TLS_CA, else .hoard/env)")
	fs.StringVar(&tf.cert, "tls-cert", "", "with an https controller: the client certificate it requires (default: env HOARD_TLS_CERT, else .hoard/env)")
	fs.StringVar(&tf.key, "tls-key", "", "the key of --tls-cert (default: env HOARD_TLS_KEY, else .hoard/env)")
	return func(hc *http.Client) (*api.ControllerClient, error) {
		u, t := *url, *token
		vars := []struct {
			v    *string
			name string
		}{{&u, "HOARD_CONTROLLER_URL"}, {&t, "HOARD_CONTROLLER_TOKEN"}, {&tf.ca, "HOARD_TLS_CA"}, {&tf.cert, "HOARD_TLS_CERT"}, {&tf.key, "HOARD_TLS_KEY"}}
		for _, v := range vars {
			if *v.v == "" {
				*v.v = os.Getenv(v.name)
			}
		}
		if u == "" || t == "" {
			env, err := readEnvFile(filepath.Join(*dir, envFile))
			if err != nil {
				return nil, fmt.Errorf("no controller given (--controller, HOARD_CONTROLLER_URL) and no running `hoard up` in %s: %v", *dir, err)
			}
			for _, v := range vars {
				if *v.v == "" {
					*v.v = env[v.name]
				}
			}
		}
		if u == "" {
			return nil, errors.New("the env file names no controller (HOARD_CONTROLLER_URL)")
		}
		if err := tf.validate(); err != nil {
			return nil, err
		}
		tc, err := tf.client(u)
		if err != nil {
			return nil, err
		}
		if tc != nil {
			if hc == nil {
				hc = &http.Client{Transport: &http.Transport{Proxy: http.ProxyFromEnvironment, TLSClientConfig: tc, TLSHandshakeTimeout: 10 * time.Second}}
			} else if tr, ok := hc.Transport.(*http.Transport); ok {
				tr.TLSClientConfig = tc
			}
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
