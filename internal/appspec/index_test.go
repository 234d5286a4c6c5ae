package appspec

import (
	"encoding/binary"
	"errors"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
)

// hostileIndex is a package in the block format, made up as it is read
// (nothing held), whose footer declares an archive of blocks blocks of
// 4 KiB and entries entries with an index of indexLen bytes: zeros
// between the header and the footer.
type hostileIndex struct {
	head, foot []byte
	size       int64
	read       atomic.Int64 // bytes read
}

func newHostileIndex(blocks, entries, indexLen int) *hostileIndex {
	const headerLen, footerLen, blockSize = 16, 48, 4096
	head := make([]byte, headerLen)
	copy(head, "hoardblk")
	binary.LittleEndian.PutUint16(head[8:], 1)
	binary.LittleEndian.PutUint32(head[12:], blockSize)
	foot := make([]byte, footerLen)
	le := binary.LittleEndian
	le.PutUint64(foot[0:], headerLen)                     // index offset
	le.PutUint32(foot[8:], uint32(indexLen))              // index length
	le.PutUint64(foot[16:], uint64(blocks-1)*blockSize+1) // size
	le.PutUint32(foot[24:], blockSize)                    // block size
	le.PutUint32(foot[28:], uint32(blocks))               // blocks
	le.PutUint32(foot[32:], uint32(entries))              // entries
	le.PutUint16(foot[36:], 1)                            // version
	le.PutUint16(foot[38:], 1)                            // an archive
	copy(foot[40:], "hoardblk")
	return &hostileIndex{head: head, foot: foot, size: int64(headerLen + indexLen + footerLen)}
}

func (h *hostileIndex) ReadAt(p []byte, off int64) (int, error) {
	h.read.Add(int64(len(p)))
	clear(p)
	for i := range p {
		switch at := off + int64(i); {
		case at < int64(len(h.head)):
			p[i] = h.head[at]
		case at >= h.size-int64(len(h.foot)) && at < h.size:
			p[i] = h.foot[at-(h.size-int64(len(h.foot)))]
		}
	}
	return len(p), nil
}

// TestHostileIndexRefused: a package whose footer declares an index, a
// block count or an entry count over what a package may have is refused
// as invalid, with an error saying so, from its footer: the check reads
// the tail it always reads and allocates a small fixed amount, however
// large the index claims to be (before, it read and held all of it, up
// to 256 MiB, and arrays of 16 bytes a block).
func TestHostileIndexRefused(t *testing.T) {
	for _, tc := range []struct {
		name                      string
		blocks, entries, indexLen int
	}{
		{"a 36 MiB index", 1, MaxPackageFiles, 36 << 20},
		{"an index just over the bound", 1, MaxPackageFiles, MaxIndexBytes + 1},
		{"200 MiB and 60,000 entries", 1, 60000, 200 << 20},
		{"more blocks than the block sums allow", MaxBlockSumsBytes/BlockSumLen + 1, 1, (MaxBlockSumsBytes/BlockSumLen+1)*8 + 30},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHostileIndex(tc.blocks, tc.entries, tc.indexLen)
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			_, err := ReadPackageAt(h, h.size, "", DefaultLimits())
			runtime.ReadMemStats(&after)
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "index is over what a package may have") {
				t.Fatalf("%v, want ErrInvalid naming the index's bound", err)
			}
			if got := h.read.Load(); got > 128<<10 {
				t.Errorf("read %d bytes of the package, want the tail alone", got)
			}
			if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 1<<20 {
				t.Errorf("allocated %d bytes to refuse it", alloc)
			}
		})
	}
	// An honest index at the bound's scale opens: the bound is not below
	// what the checks need.
	if MaxIndexBytes < (MaxBlockSumsBytes/BlockSumLen)*8+MaxPackageFiles*(22+255) {
		t.Errorf("MaxIndexBytes %d is below the most blocks and files with 255-byte paths", MaxIndexBytes)
	}
}
