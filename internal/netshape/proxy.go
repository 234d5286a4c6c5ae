package netshape

import (
	"context"
	"fmt"
	"sync"

	toxiproxy "github.com/Shopify/toxiproxy/v2/client"
)

// Proxy is one shaped path: a loopback listener whose connections are
// forwarded to an upstream through toxiproxy's toxics.
type Proxy struct {
	// Name is the proxy's name in toxiproxy.
	Name string
	// Addr is the loopback host:port clients connect to.
	Addr string
	// Endpoint is Addr as a URL, with the upstream's scheme
	// ("http://127.0.0.1:41234").
	Endpoint string
	// Upstream is the host:port connections are forwarded to.
	Upstream string

	server *Server
	tp     *toxiproxy.Proxy

	mu       sync.Mutex
	down, up Link
	// chain holds the names of the toxics toxiproxy has, per stream, in
	// chain order.
	chain  map[string][]string
	closed bool
}

// Links returns the current shaping: down (upstream to client) and up.
func (p *Proxy) Links() (down, up Link) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.down, p.up
}

// Update changes the shaping of the proxy, for open connections as well as
// new ones. It is not atomic: while a direction gains or loses a latency or
// bandwidth toxic, its toxics are removed and added again in order, and
// data passing in that instant may go through partly shaped. Changing only
// the figures of toxics a direction already has is done in place.
func (p *Proxy) Update(down, up Link) error {
	if err := validateLinks(down, up); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return errClosed
	}
	if err := p.applyLocked(context.Background(), down, up); err != nil {
		return fmt.Errorf("netshape: update proxy %q: %w", p.Name, err)
	}
	p.server.logger.Info("netshape: reshaped", "proxy", p.Name, "down", down.String(), "up", up.String())
	return nil
}

// apply sets the toxics of a proxy nobody else holds yet.
func (p *Proxy) apply(ctx context.Context, down, up Link) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.applyLocked(ctx, down, up)
}

func (p *Proxy) applyLocked(ctx context.Context, down, up Link) error {
	for _, d := range []struct {
		stream string
		link   Link
	}{{Downstream, down}, {Upstream, up}} {
		if err := p.setStream(ctx, d.stream, toxicsFor(d.stream, d.link)); err != nil {
			return err
		}
	}
	p.down, p.up = down, up
	return nil
}

// setStream makes stream's chain want. p.chain follows every call that
// succeeded, so after a failure it still says what toxiproxy has.
func (p *Proxy) setStream(ctx context.Context, stream string, want []toxic) error {
	have := p.chain[stream]
	if sameChain(have, want) {
		for _, t := range want {
			if err := ctx.Err(); err != nil {
				return err
			}
			if _, err := p.tp.UpdateToxic(t.name, 1, t.attrs); err != nil {
				return fmt.Errorf("update toxic %s: %w", t.name, err)
			}
		}
		return nil
	}
	// New toxics always go to the end of toxiproxy's chain: rebuild it.
	for i := len(have) - 1; i >= 0; i-- {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := p.tp.RemoveToxic(have[i]); err != nil {
			return fmt.Errorf("remove toxic %s: %w", have[i], err)
		}
		p.chain[stream] = have[:i]
	}
	for _, t := range want {
		if err := ctx.Err(); err != nil {
			return err
		}
		if _, err := p.tp.AddToxic(t.name, t.typ, t.stream, 1, t.attrs); err != nil {
			return fmt.Errorf("add toxic %s: %w", t.name, err)
		}
		p.chain[stream] = append(p.chain[stream], t.name)
	}
	return nil
}

// Cut takes the path down, as a failed link or a crashed store would look
// to clients: toxiproxy closes the listener and every open connection
// through the proxy, so reads in flight end early and new connections are
// refused. Restore brings it back on the same address.
func (p *Proxy) Cut() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return errClosed
	}
	if err := p.tp.Disable(); err != nil {
		return fmt.Errorf("netshape: cut proxy %q: %w", p.Name, err)
	}
	p.server.logger.Info("netshape: cut", "proxy", p.Name)
	return nil
}

// Restore undoes Cut: the proxy listens on its address again, with the
// same shaping. It fails if another process took the port meanwhile.
func (p *Proxy) Restore() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return errClosed
	}
	if err := p.tp.Enable(); err != nil {
		return fmt.Errorf("netshape: restore proxy %q: %w", p.Name, err)
	}
	if p.tp.Listen != p.Addr {
		return fmt.Errorf("netshape: restore proxy %q: listens on %s, not %s", p.Name, p.tp.Listen, p.Addr)
	}
	p.server.logger.Info("netshape: restored", "proxy", p.Name)
	return nil
}

// Close deletes the proxy from toxiproxy, closing its listener and every
// connection through it. Server.Close closes every proxy anyway.
func (p *Proxy) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	p.closed = true
	p.server.mu.Lock()
	delete(p.server.proxies, p.Name)
	serverClosed := p.server.closed
	p.server.mu.Unlock()
	if serverClosed {
		return nil
	}
	if err := p.tp.Delete(); err != nil {
		return fmt.Errorf("netshape: delete proxy %q: %w", p.Name, err)
	}
	return nil
}
