package erasure

import (
	"fmt"

	"github.com/klauspost/reedsolomon"
)

// Coder codes the stripes of one object. Not safe for concurrent use.
type Coder struct {
	m      *Manifest
	enc    reedsolomon.Encoder
	pieces [][]byte // Data+Parity buffers of Chunk bytes, reused
}

// NewCoder returns a coder for m's layout.
func NewCoder(m *Manifest) (*Coder, error) {
	enc, err := reedsolomon.New(m.Data, max(m.Parity, 1))
	if err != nil {
		return nil, fmt.Errorf("erasure: %w", err)
	}
	c := &Coder{m: m, enc: enc, pieces: make([][]byte, m.Data+max(m.Parity, 1))}
	for i := range c.pieces {
		c.pieces[i] = make([]byte, m.Chunk)
	}
	return c, nil
}

// Encode codes stripe s, whose bytes of the object are data (the whole
// stripe, or the object's tail for the last one), records the pieces'
// checksums in the manifest and returns the Data+Parity pieces. The
// pieces are the coder's, valid until the next call.
func (c *Coder) Encode(s int, data []byte) ([][]byte, error) {
	if int64(len(data)) > c.m.StripeSize() || s < 0 || s >= c.m.Stripes() {
		return nil, fmt.Errorf("erasure: stripe %d of %d bytes does not fit the layout", s, len(data))
	}
	for i := range c.m.Data {
		p := c.pieces[i]
		n := copy(p, data[min(len(data), i*c.m.Chunk):])
		clear(p[n:])
	}
	if err := c.enc.Encode(c.pieces); err != nil {
		return nil, fmt.Errorf("erasure: %w", err)
	}
	out := c.pieces[:c.m.Shards()]
	for i, p := range out {
		c.m.Sums[i][s] = Checksum(p)
	}
	return out, nil
}

// Decode rebuilds the data of one stripe from pieces, one per shard, nil
// where missing (at least Data present, each already verified), and
// appends the stripe's bytes of the object to dst. Stripe s tells how much
// of the last stripe is the object's. Missing data pieces are rebuilt in
// place in pieces (new buffers).
func (c *Coder) Decode(dst []byte, s int, pieces [][]byte) ([]byte, error) {
	if err := c.reconstruct(pieces, true); err != nil {
		return dst, err
	}
	left := c.m.Size - int64(s)*c.m.StripeSize()
	for i := 0; i < c.m.Data && left > 0; i++ {
		n := min(left, int64(c.m.Chunk))
		dst = append(dst, pieces[i][:n]...)
		left -= n
	}
	return dst, nil
}

// Reconstruct fills every nil piece of one stripe (data and parity) from
// the others: what a rebuild sends to the shards' new holders.
func (c *Coder) Reconstruct(pieces [][]byte) error { return c.reconstruct(pieces, false) }

func (c *Coder) reconstruct(pieces [][]byte, dataOnly bool) error {
	if len(pieces) != c.m.Shards() {
		return fmt.Errorf("erasure: %d pieces for %d shards", len(pieces), c.m.Shards())
	}
	have := 0
	for _, p := range pieces {
		if p != nil {
			have++
		}
	}
	if have < c.m.Data {
		return ErrTooFewShards
	}
	if c.m.Parity == 0 {
		return nil // all data present
	}
	var err error
	if dataOnly {
		err = c.enc.ReconstructData(pieces)
	} else {
		err = c.enc.Reconstruct(pieces)
	}
	if err != nil {
		return fmt.Errorf("erasure: %w", err)
	}
	return nil
}
