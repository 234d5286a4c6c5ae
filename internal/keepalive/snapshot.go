package keepalive

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"
)

// ErrSnapshot is wrapped by the errors of Restore: the snapshot is corrupt,
// of an unknown version, or of a histogram of another shape. A caller that
// gets it starts the application's histogram afresh.
var ErrSnapshot = errors.New("keepalive: bad snapshot")

// snapshotVersion is the first byte of a snapshot.
const snapshotVersion = 1

// Snapshot encodes the histogram: the version (1), the bin width in
// nanoseconds, the number of bins, the number of non-empty bins, then for
// each non-empty bin the number of empty bins before it (since the previous
// non-empty one) and its count, and last the out-of-bounds count, all but the
// version as minimal unsigned varints. Its size is at most 24 + 12 × bins
// bytes (2,904 with the default 240 bins), and in practice 11 bytes plus a
// few per non-empty bin. It holds no times, and not the invocations in
// flight.
func (p *Policy) Snapshot() []byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	nonEmpty := 0
	for _, c := range p.counts {
		if c != 0 {
			nonEmpty++
		}
	}
	b := make([]byte, 0, 16+nonEmpty*3)
	b = append(b, snapshotVersion)
	b = binary.AppendUvarint(b, uint64(p.cfg.BinWidth))
	b = binary.AppendUvarint(b, uint64(len(p.counts)))
	b = binary.AppendUvarint(b, uint64(nonEmpty))
	prev := -1
	for i, c := range p.counts {
		if c != 0 {
			b = binary.AppendUvarint(b, uint64(i-prev-1))
			b = binary.AppendUvarint(b, c)
			prev = i
		}
	}
	return binary.AppendUvarint(b, p.oob)
}

// Restore replaces the histogram with the one snapshot encodes, which must
// have this Policy's bin width and number of bins. On error, wrapping
// ErrSnapshot, the Policy is unchanged. The tracking of invocations in
// flight is left as it is.
func (p *Policy) Restore(snapshot []byte) error {
	d := decoder{b: snapshot}
	if len(snapshot) == 0 {
		return fmt.Errorf("%w: empty", ErrSnapshot)
	}
	if v := d.readByte(); v != snapshotVersion {
		return fmt.Errorf("%w: unknown version %d", ErrSnapshot, v)
	}
	// cfg is immutable, and so the number of bins: no lock needed.
	nbins := int(p.cfg.Range / p.cfg.BinWidth)
	width, bins := d.uvarint(), d.uvarint()
	if d.err == nil && (width != uint64(p.cfg.BinWidth) || bins != uint64(nbins)) {
		return fmt.Errorf("%w: %d bins of %s, this policy has %d of %s", ErrSnapshot,
			bins, FormatDuration(time.Duration(width)), nbins, FormatDuration(p.cfg.BinWidth))
	}
	counts := make([]uint64, nbins)
	var inRange uint64
	nonEmpty := d.uvarint()
	if nonEmpty > uint64(len(counts)) {
		d.fail("%d non-empty bins of %d", nonEmpty, len(counts))
	}
	next := uint64(0) // the first bin the next non-empty one may be
	for range nonEmpty {
		gap, c := d.uvarint(), d.uvarint()
		if d.err != nil {
			break
		}
		if gap >= uint64(len(counts))-next {
			d.fail("bin past the last")
			break
		}
		if c == 0 {
			d.fail("empty bin listed")
			break
		}
		if c > math.MaxUint64-inRange {
			d.fail("counts overflow")
			break
		}
		i := next + gap
		counts[i] = c
		inRange += c
		next = i + 1
	}
	oob := d.uvarint()
	if d.err == nil && oob > math.MaxUint64-inRange {
		d.fail("counts overflow")
	}
	if d.err == nil && len(d.b) != 0 {
		d.fail("%d trailing bytes", len(d.b))
	}
	if d.err != nil {
		return d.err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	copy(p.counts, counts)
	p.inRange, p.oob = inRange, oob
	return nil
}

// decoder reads a snapshot; after the first error every read returns 0.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: "+format, append([]any{ErrSnapshot}, args...)...)
	}
}

func (d *decoder) readByte() byte {
	if d.err != nil || len(d.b) == 0 {
		d.fail("truncated")
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

// uvarint reads a minimal unsigned varint, so that each histogram has one
// encoding.
func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	switch {
	case n == 0:
		d.fail("truncated")
		return 0
	case n < 0:
		d.fail("varint overflows 64 bits")
		return 0
	case n > 1 && d.b[n-1] == 0:
		d.fail("non-minimal varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}
