package peer

import (
	"context"
	"net"
	"net/http"
)

// An answer of a few KiB (a small object streamed with its MAC) outgrows
// net/http's connection buffer (4 KiB), which then writes it in two
// pieces: the reader wakes for the first, parses the headers, and reads
// again, often waiting, for the rest. Corked (TCP_CORK, Linux), the
// pieces leave as one segment once the answer is complete.

// connKey carries the TCP connection a request came on (ConnContext).
type connKey struct{}

// ConnContext is the http.Server.ConnContext of a server of the peer
// protocol: it hands the handler the request's TCP connection, so that a
// small answer can leave in one segment. Without it (or over TLS) answers
// are sent as they are written.
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	if tc, ok := c.(*net.TCPConn); ok {
		return context.WithValue(ctx, connKey{}, tc)
	}
	return ctx
}

// corkFrom and corkTo bound the streamed bodies whose answers are corked:
// smaller ones fit the connection buffer with their headers (one write
// already), larger ones take several writes of a chunk or more anyway.
const (
	corkFrom = 3 << 10
	corkTo   = directCopy
)

// corkSmall corks the connection of r for an answer streaming a body of
// size bytes when it is worth it, and returns what uncorks it (to be
// deferred, whatever happens); the handler flushes the answer once it is
// complete (http.ResponseController), so that it leaves then.
func corkSmall(r *http.Request, size int64) (uncork func()) {
	tc, ok := r.Context().Value(connKey{}).(*net.TCPConn)
	if !ok || size < corkFrom || size >= corkTo || !setCork(tc, true) {
		return func() {}
	}
	return func() { setCork(tc, false) }
}
