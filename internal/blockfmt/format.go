// Package blockfmt is hoard's seekable block format for large artifacts:
// code packages, models, any object read in ranges. The uncompressed bytes
// are cut into fixed-size blocks, each compressed on its own with zstd (or
// stored as it is when that is no smaller) and guarded by a CRC-32C of its
// uncompressed bytes; an index at the end gives every block's compressed
// length and checksum and, for an archive, a table of contents (path, mode,
// offset, size) of the files laid end to end in the uncompressed stream.
// A reader fetches the tail once, then only the blocks that cover the
// bytes asked for, so one file of an archive or one range of a model costs
// the blocks that hold it, not the whole object. ADR 0020 gives the layout.
//
// The package does no I/O of its own: a Writer writes to an io.Writer, a
// Reader fetches through a Source (a file, a ranged GET). Every length read
// from an object is checked before it sizes anything, and a block whose
// checksum does not match is an error, never wrong bytes.
package blockfmt

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// Layout (all integers little-endian):
//
//	header  16 bytes: magic "hoardblk", version u16, flags u16, block size u32
//	blocks  each zstd frame or stored bytes, back to back
//	index   per block: length u32 (high bit: stored), crc32c u32;
//	        then per TOC entry: path length u16, path, mode u32, offset u64, size u64
//	footer  48 bytes: index offset u64, index length u32, index crc32c u32,
//	        size u64, block size u32, blocks u32, entries u32, version u16,
//	        flags u16, magic "hoardblk"
const (
	magic      = "hoardblk"
	version    = 1
	headerLen  = 16
	footerLen  = 48
	blockEntry = 8
	// storedBit marks a block kept uncompressed (incompressible data).
	storedBit = 1 << 31

	// flagArchive marks an object whose stream is files with a TOC.
	flagArchive = 1
)

// Limits on what a Writer produces and a Reader accepts.
const (
	// DefaultBlockSize is the block size of NewWriter without WithBlockSize.
	DefaultBlockSize = 512 << 10
	// MinBlockSize and MaxBlockSize bound the block size.
	MinBlockSize = 4 << 10
	MaxBlockSize = 16 << 20
	// MaxSize bounds the uncompressed size of an object (1 PiB).
	MaxSize = 1 << 50
	// MaxEntries bounds the entries of an archive's TOC.
	MaxEntries = 1 << 20
	// MaxPath bounds the length of a path in the TOC.
	MaxPath = 4096
	// MaxIndex bounds the index (block table and TOC) in bytes; a Reader
	// may be given a lower bound (WithMaxIndex).
	MaxIndex = 256 << 20
	// tocFixed is a TOC entry's bytes besides its path.
	tocFixed = 2 + 4 + 8 + 8
)

// Errors. Every error of a malformed object wraps ErrFormat; a block whose
// bytes do not match their checksum wraps ErrChecksum.
var (
	ErrFormat   = errors.New("blockfmt: malformed object")
	ErrChecksum = errors.New("blockfmt: block checksum mismatch")
	// ErrNotArchive is returned by the archive methods of a plain object.
	ErrNotArchive = errors.New("blockfmt: not an archive")
	// ErrTooLarge wraps a Reader's refusal of an object whose footer
	// declares an index, blocks or entries over the Reader's bounds
	// (WithMaxIndex, WithMaxBlocks, WithMaxEntries): it may be well
	// formed, but this reader will not hold its index.
	ErrTooLarge = errors.New("blockfmt: object over the reader's bounds")
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func checksum(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

type footer struct {
	indexOff  uint64
	indexLen  uint32
	indexCRC  uint32
	size      uint64
	blockSize uint32
	blocks    uint32
	entries   uint32
	version   uint16
	flags     uint16
}

func (f *footer) marshal() []byte {
	b := make([]byte, footerLen)
	le := binary.LittleEndian
	le.PutUint64(b[0:], f.indexOff)
	le.PutUint32(b[8:], f.indexLen)
	le.PutUint32(b[12:], f.indexCRC)
	le.PutUint64(b[16:], f.size)
	le.PutUint32(b[24:], f.blockSize)
	le.PutUint32(b[28:], f.blocks)
	le.PutUint32(b[32:], f.entries)
	le.PutUint16(b[36:], f.version)
	le.PutUint16(b[38:], f.flags)
	copy(b[40:], magic)
	return b
}

func header(blockSize int) []byte {
	b := make([]byte, headerLen)
	copy(b, magic)
	binary.LittleEndian.PutUint16(b[8:], version)
	binary.LittleEndian.PutUint32(b[12:], uint32(blockSize))
	return b
}

// parseFooter checks the footer of an object of objSize bytes: its magic,
// version, and that the sizes it gives are consistent with each other and
// with the object's size.
func parseFooter(b []byte, objSize int64) (footer, error) {
	le := binary.LittleEndian
	if len(b) != footerLen || string(b[40:]) != magic {
		return footer{}, formatErr("no footer magic")
	}
	f := footer{
		indexOff:  le.Uint64(b[0:]),
		indexLen:  le.Uint32(b[8:]),
		indexCRC:  le.Uint32(b[12:]),
		size:      le.Uint64(b[16:]),
		blockSize: le.Uint32(b[24:]),
		blocks:    le.Uint32(b[28:]),
		entries:   le.Uint32(b[32:]),
		version:   le.Uint16(b[36:]),
		flags:     le.Uint16(b[38:]),
	}
	switch {
	case f.version != version:
		return footer{}, formatErr("version %d, want %d", f.version, version)
	case f.flags&^flagArchive != 0:
		return footer{}, formatErr("unknown flags %#x", f.flags)
	case f.blockSize < MinBlockSize || f.blockSize > MaxBlockSize:
		return footer{}, formatErr("block size %d out of [%d, %d]", f.blockSize, MinBlockSize, MaxBlockSize)
	case f.size > MaxSize:
		return footer{}, formatErr("size %d over %d", f.size, uint64(MaxSize))
	case uint64(f.blocks) != (f.size+uint64(f.blockSize)-1)/uint64(f.blockSize):
		return footer{}, formatErr("%d blocks for %d bytes in blocks of %d", f.blocks, f.size, f.blockSize)
	case f.entries > MaxEntries:
		return footer{}, formatErr("%d entries, over %d", f.entries, MaxEntries)
	case f.entries > 0 && f.flags&flagArchive == 0:
		return footer{}, formatErr("entries in an object that is not an archive")
	case f.indexLen > MaxIndex:
		return footer{}, formatErr("index of %d bytes, over %d", f.indexLen, MaxIndex)
	case uint64(f.indexLen) < uint64(f.blocks)*blockEntry+uint64(f.entries)*tocFixed:
		return footer{}, formatErr("index of %d bytes too short for %d blocks and %d entries", f.indexLen, f.blocks, f.entries)
	case uint64(f.indexLen) > uint64(f.blocks)*blockEntry+uint64(f.entries)*(tocFixed+MaxPath):
		// Even with every path MaxPath long: the rest would be bytes
		// after the TOC, refused once read.
		return footer{}, formatErr("index of %d bytes too long for %d blocks and %d entries", f.indexLen, f.blocks, f.entries)
	case f.indexOff < headerLen || objSize < footerLen || f.indexOff >= uint64(objSize) || f.indexOff+uint64(f.indexLen) != uint64(objSize)-footerLen:
		return footer{}, formatErr("index at %d+%d does not end at the footer of a %d-byte object", f.indexOff, f.indexLen, objSize)
	}
	return f, nil
}

func formatErr(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrFormat}, args...)...)
}
