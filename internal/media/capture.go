package media

import "io"

// Capture passes a body through, keeping a copy of its first bytes for
// Sniff as they stream by: at most MaxPrefix of them, and none past
// MagicLen when those name no format Sniff reads, so that a write of
// anything else holds no more than MagicLen bytes for it. It adds no
// read of its own.
//
// A Capture is used by one goroutine at a time (the one reading the body).
type Capture struct {
	r    io.Reader
	buf  []byte
	done bool // the prefix is complete, or not media
}

// NewCapture returns a Capture reading from r.
func NewCapture(r io.Reader) *Capture { return &Capture{r: r} }

// Read reads from the body, keeping what the prefix still needs.
func (c *Capture) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if n > 0 && !c.done {
		c.keep(p[:n])
	}
	return n, err
}

func (c *Capture) keep(p []byte) {
	if c.buf == nil {
		c.buf = make([]byte, 0, MagicLen)
	}
	for len(p) > 0 && !c.done {
		if len(c.buf) < MagicLen {
			k := min(MagicLen-len(c.buf), len(p))
			c.buf, p = append(c.buf, p[:k]...), p[k:]
			if len(c.buf) == MagicLen && !Known(c.buf) {
				c.buf, c.done = nil, true
			}
			continue
		}
		if cap(c.buf) < MaxPrefix {
			nb := make([]byte, len(c.buf), MaxPrefix)
			copy(nb, c.buf)
			c.buf = nb
		}
		k := min(MaxPrefix-len(c.buf), len(p))
		c.buf, p = append(c.buf, p[:k]...), p[k:]
		c.done = len(c.buf) == MaxPrefix
	}
}

// Features sniffs the prefix kept, for an object of size bytes (-1 when
// unknown): call it once the body was read to its end, as far as the
// writer read it. A body shorter than MagicLen is sniffed as it is. A nil
// Capture has none.
func (c *Capture) Features(size int64) (Features, bool) {
	if c == nil || len(c.buf) == 0 {
		return Features{}, false
	}
	return Sniff(c.buf, size)
}
