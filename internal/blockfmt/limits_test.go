package blockfmt

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// manyFiles is an archive of n files with long names, the first of
// 5,000 bytes (two blocks), the others empty: an index of about
// n*(tocFixed+200) bytes.
func manyFiles(t testing.TB, n int) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := NewWriter(&buf, WithBlockSize(MinBlockSize))
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		body := ""
		if i == 0 {
			body = strings.Repeat("x", 5000)
		}
		if err := w.AddFile(fmt.Sprintf("%s-%05d", strings.Repeat("p", 200), i), 0o644, strings.NewReader(body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestReaderBounds: an index, block count or entry count over the
// reader's bounds is refused from the footer alone, before any of the
// index is fetched; within them the object opens.
func TestReaderBounds(t *testing.T) {
	obj := manyFiles(t, 1000) // an index of about 222 KB, past the tail fetched first
	open := func(opts ...ReaderOption) (*countingSource, error) {
		src := &countingSource{Source: ReaderAtSource(bytes.NewReader(obj))}
		r, err := NewReader(context.Background(), src, int64(len(obj)), opts...)
		if err == nil {
			r.Close()
		}
		return src, err
	}
	if src, err := open(); err != nil || len(src.ranges) != 2 {
		t.Fatalf("without bounds: %v after fetching %v, want the tail then the index", err, src.ranges)
	}
	for name, opt := range map[string]ReaderOption{
		"index":   WithMaxIndex(100 << 10),
		"entries": WithMaxEntries(999),
		"blocks":  WithMaxBlocks(1),
	} {
		src, err := open(opt)
		if !errors.Is(err, ErrTooLarge) || errors.Is(err, ErrFormat) {
			t.Errorf("%s: %v, want ErrTooLarge", name, err)
		}
		if len(src.ranges) != 1 {
			t.Errorf("%s: fetched %v, want the tail alone", name, src.ranges)
		}
	}
	if _, err := open(WithMaxIndex(1<<20), WithMaxEntries(1000), WithMaxBlocks(2)); err != nil {
		t.Errorf("within the bounds: %v", err)
	}
}

// TestIndexTooLongForItsCounts: a footer declaring an index longer than
// its blocks and entries could fill, even with every path MaxPath long,
// is malformed, refused before the index is read.
func TestIndexTooLongForItsCounts(t *testing.T) {
	obj := hugeIndex(1, 1, 1<<20)
	src := &countingSource{Source: ReaderAtSource(bytes.NewReader(obj))}
	if _, err := NewReader(context.Background(), src, int64(len(obj))); !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), "too long") {
		t.Fatalf("%v, want ErrFormat (too long)", err)
	}
	if len(src.ranges) != 1 {
		t.Fatalf("fetched %v, want the tail alone", src.ranges)
	}
}

// hugeIndex is an object of zeros whose footer declares an archive of
// blocks blocks of MinBlockSize (the last one a byte), entries entries,
// and an index of indexLen bytes right after the header.
func hugeIndex(blocks, entries, indexLen int) []byte {
	size := uint64(blocks-1)*MinBlockSize + 1
	obj := make([]byte, headerLen+indexLen+footerLen)
	copy(obj, header(MinBlockSize))
	f := footer{indexOff: headerLen, indexLen: uint32(indexLen), size: size, blockSize: MinBlockSize,
		blocks: uint32(blocks), entries: uint32(entries), version: version, flags: flagArchive}
	copy(obj[headerLen+indexLen:], f.marshal())
	binary.LittleEndian.PutUint32(obj[headerLen+indexLen+12:], 0) // the index CRC: never reached
	return obj
}
