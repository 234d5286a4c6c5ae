package peer

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/hoard-io/hoard/internal/store"
)

// Installs (ADR 32): a cachelet offers a copy of an object it holds to
// the object's owner, which keeps it in memory if it verifies it, instead
// of the copy being dropped (a ring change gave the key to another
// member, or a shrink evicts it). Unlike Put nothing is written to the
// store: the offer is a version the store (or the owner) already has.
//
// The offered object's metadata (its version above all) and its body's
// CRC32C travel in one header that the request's signature covers, so
// that nobody without the application's key can offer bytes or pass them
// off as another version; the trailer's CRC32C must match it too.

// installPrefix is the path prefix of installs: /v1/install/<bucket>/<key>.
const installPrefix = "/v1/install/"

// ErrRefused: the peer refused an offered copy (it is not the key's
// owner, holds a newer one, has no room, or could not verify it). The
// offer is dropped; nothing is wrong with the caller.
var ErrRefused = errors.New("peer: refused")

// MaxInstallHeader bounds the install header (the object's metadata).
const MaxInstallHeader = 16 << 10

// Installer is implemented by Owners that take copies offered by peers.
type Installer interface {
	// PeerInstall offers a copy of the object info describes (its
	// version, size and metadata as the sender holds them). body holds
	// exactly info.Size bytes, checked against the signed CRC32C as
	// it is read: a body that fails returns an error from a Read before
	// its last bytes, and nothing may be kept. It returns nil once the
	// copy is kept, an error wrapping ErrRefused when it is not.
	PeerInstall(ctx context.Context, info store.ObjectInfo, body io.Reader) error
}

// offer is the install header's content.
type offer struct {
	Info   store.ObjectInfo `json:"info"`
	CRC32C uint32           `json:"crc32c"`
}

// Install offers the copy of an object described by info, whose body
// (exactly info.Size bytes) has CRC32C crc, to the cachelet at addr. It
// returns nil when the peer kept it, an error wrapping ErrRefused when it
// refused it, and another error when it could not be asked.
func (c *Client) Install(ctx context.Context, addr string, info store.ObjectInfo, body io.Reader, crc uint32) error {
	info.Headers = nil // the store's answer headers are not the object's
	data, err := json.Marshal(offer{Info: info, CRC32C: crc})
	if err != nil {
		return err
	}
	hdr := base64.RawURLEncoding.EncodeToString(data)
	if len(hdr) > MaxInstallHeader {
		return fmt.Errorf("%w: metadata too large to offer", ErrRefused)
	}
	path := installPrefix + url.PathEscape(info.Bucket) + "/" + escapeKey(info.Key)
	return c.putStreamed(ctx, addr, path, io.LimitReader(body, info.Size), info.Size, hdrInstall, hdr)
}

// serveInstall takes an offered copy to the Owner, if it is an Installer.
func (s *Server) serveInstall(a answer, r *http.Request) {
	inst, ok := s.owner.(Installer)
	rest := strings.TrimPrefix(r.URL.Path, installPrefix)
	bucket, key, found := strings.Cut(rest, "/")
	if !ok || r.Method != http.MethodPut || !found || bucket == "" || key == "" {
		a.error(ErrBadRequest)
		return
	}
	raw := r.Header.Get(hdrInstall)
	size, err := strconv.ParseInt(r.Header.Get(hdrSize), 10, 64)
	if err != nil || size < 0 || len(raw) > MaxInstallHeader {
		a.error(ErrBadRequest)
		return
	}
	data, err := base64.RawURLEncoding.DecodeString(raw)
	var o offer
	if err != nil || json.Unmarshal(data, &o) != nil {
		a.error(ErrBadRequest)
		return
	}
	if o.Info.Bucket != bucket || o.Info.Key != key || o.Info.Size != size || o.Info.ETag == "" {
		a.error(ErrBadRequest)
		return
	}
	o.Info.Headers = nil
	body := &trailerChecked{r: r.Body, req: r, remaining: size, crc: crc32.New(castagnoli), signed: &o.CRC32C}
	if err := inst.PeerInstall(r.Context(), o.Info, body); err != nil {
		if body.err != nil {
			err = fmt.Errorf("%w: %w", ErrRefused, body.err)
		}
		s.log.Debug("offered copy refused", "bucket", bucket, "key", key, "err", err)
		a.error(err)
		return
	}
	a.whole(http.StatusNoContent, nil)
}
