package instance

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/hoard-io/hoard/internal/cachelet"
	"github.com/hoard-io/hoard/internal/writelog"
	"github.com/prometheus/client_golang/prometheus"
)

// placeholderKeyFile holds, in a cachelet's own log directory, the key
// its placeholders are signed with when it has no application secret
// (a cachelet alone): made once, it lives and moves with the log.
const placeholderKeyFile = "placeholder.key"

// openDurable opens the cachelet's durable write log (Config.DurableWrites)
// and fills in the cachelet's log, replay, backup, shadow settings and
// placeholder key.
func openDurable(cfg *Config, s *starting, in *Instance, log *slog.Logger, reg prometheus.Registerer) error {
	if cfg.Disk.Dir == "" {
		return errors.New("instance: durable writes need the disk tier's directory (Disk.Dir)")
	}
	id := cfg.ID
	if cfg.Registry == nil || id == "" {
		id = "local"
	}
	lcfg := cfg.DurableLog
	parent := filepath.Join(cfg.Disk.Dir, "writelog")
	if err := sharedDir(parent, cfg.Disk.Group); err != nil {
		return fmt.Errorf("instance: durable log: %w", err)
	}
	// Each cachelet's own log is its alone (0700).
	lcfg.Dir = filepath.Join(parent, id)
	lcfg.Logger, lcfg.Registerer = log.With("component", "writelog"), reg
	var (
		pending []writelog.Pending
		err     error
	)
	if in.wlog, pending, err = writelog.Open(lcfg); err != nil {
		return fmt.Errorf("instance: %w", err)
	}
	s.wlog = in.wlog
	cfg.Cachelet.Log, cfg.Cachelet.Replay = in.wlog, pending
	cfg.Cachelet.Shadow = cfg.DurableShadow
	// The key is there whether or not shadows are on now: a log written
	// with them may be replayed without, and its placeholders must still
	// be told from other objects.
	if cfg.Cachelet.ShadowKey, err = placeholderKey(cfg, lcfg.Dir); err != nil {
		return fmt.Errorf("instance: durable log: %w", err)
	}
	if cfg.DurableBackup != nil {
		b := *cfg.DurableBackup
		cfg.Cachelet.Backup = &b
	}
	return nil
}

// placeholderKey returns the key placeholders of durable writes are
// signed with (cachelet.Config.ShadowKey). With the application's peer
// secret, one derived from it, which all its cachelets share (the replay
// of a write or a backup's takeover may run in another); else the key
// kept in the log directory dir, made there the first time.
func placeholderKey(cfg *Config, dir string) ([]byte, error) {
	if len(cfg.Secret) > 0 {
		m := hmac.New(sha256.New, cfg.Secret)
		m.Write([]byte("hoard placeholder key v1\x00"))
		m.Write([]byte(cfg.App))
		return m.Sum(nil), nil
	}
	path := filepath.Join(dir, placeholderKeyFile)
	key, err := os.ReadFile(path)
	switch {
	case err == nil && len(key) >= cachelet.MinShadowKey:
		return key, nil
	case err == nil:
		return nil, fmt.Errorf("%s holds %d bytes, fewer than a placeholder key's %d", path, len(key), cachelet.MinShadowKey)
	case !errors.Is(err, os.ErrNotExist):
		return nil, err
	}
	key = make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, err
	}
	tmp := path + ".new"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, err
	}
	_, werr := f.Write(key)
	if serr := f.Sync(); werr == nil {
		werr = serr
	}
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Rename(tmp, path)
	}
	if werr == nil {
		werr = syncDir(dir)
	}
	if werr != nil {
		_ = os.Remove(tmp)
		return nil, werr
	}
	return key, nil
}

// syncDir makes a rename in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
