package controller

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"

	"github.com/hoard-io/hoard/internal/api"
	"github.com/hoard-io/hoard/internal/appspec"
	"github.com/hoard-io/hoard/internal/bytesize"
)

// ErrPackageTooLarge is an upload larger than Config.MaxPackage.
var ErrPackageTooLarge = errors.New("the code package is too large")

// DeployFrom deploys the code package body reads (an upload): it spools
// it to a file of its own in Config.UploadDir (mode 0600), hashing it as
// it arrives and refusing it past Config.MaxPackage, checks it from the
// file (its index and spec, every block; appspec.ReadPackageAt), stores
// it by streaming the file, and removes the file however the deploy
// ends. Memory does not grow with the package: a few buffers, the
// block format's index and its block sums (44 bytes a block).
func (c *Controller) DeployFrom(ctx context.Context, body io.Reader) (*api.AppInfo, error) {
	f, size, sum, err := c.spool(body)
	if err != nil {
		return nil, err
	}
	defer func() {
		f.Close()
		os.Remove(f.Name())
	}()
	pkg, err := appspec.ReadPackageAt(f, size, sum, appspec.LimitsFor(c.cfg.MaxPackage))
	if err != nil {
		return nil, err
	}
	return c.deploy(ctx, pkg, f)
}

// spool copies body to a new file in Config.UploadDir, at most
// Config.MaxPackage bytes, and returns it with its size and SHA-256; on
// an error the file is gone.
func (c *Controller) spool(body io.Reader) (*os.File, int64, string, error) {
	f, err := os.CreateTemp(c.cfg.UploadDir, ".hoard-upload-*")
	if err != nil {
		return nil, 0, "", fmt.Errorf("spooling the code package: %w", err)
	}
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(f, h), io.LimitReader(body, c.cfg.MaxPackage+1))
	if err != nil || n > c.cfg.MaxPackage {
		f.Close()
		os.Remove(f.Name())
	}
	switch {
	case errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT):
		return nil, 0, "", fmt.Errorf("spooling the code package to %s: the disk is full after %d MiB: %w", c.cfg.UploadDir, n>>20, err)
	case err != nil:
		return nil, 0, "", fmt.Errorf("%w: reading the code package: %v", appspec.ErrInvalid, err)
	case n > c.cfg.MaxPackage:
		return nil, 0, "", c.tooLarge()
	}
	return f, n, hex.EncodeToString(h.Sum(nil)), nil
}

// tooLarge is the error of an upload past Config.MaxPackage.
func (c *Controller) tooLarge() error {
	return fmt.Errorf("%w: it is larger than %s, the controller's limit (--max-package)", ErrPackageTooLarge, bytesize.Format(c.cfg.MaxPackage))
}
