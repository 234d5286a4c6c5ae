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
	"net/http"
	"os"
	"path/filepath"
	"strings"
)

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
