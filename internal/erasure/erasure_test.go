package erasure

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hoard-io/hoard/internal/ring"
)

// encodeAll codes data under c and returns the manifest and the k+r
// shards.
func encodeAll(t testing.TB, c Config, data []byte) (*Manifest, [][]byte) {
	t.Helper()
	m := NewManifest(c, "etag1", int64(len(data)))
	cd, err := NewCoder(m)
	if err != nil {
		t.Fatal(err)
	}
	shards := make([][]byte, m.Shards())
	ss := int(m.StripeSize())
	for s := range m.Stripes() {
		pieces, err := cd.Encode(s, data[s*ss:min(len(data), (s+1)*ss)])
		if err != nil {
			t.Fatal(err)
		}
		for i, p := range pieces {
			shards[i] = append(shards[i], p...)
		}
	}
	return m, shards
}

// decodeRange decodes bytes [off, off+n) from the shards present.
func decodeRange(t testing.TB, m *Manifest, shards [][]byte, off, n int64) ([]byte, error) {
	t.Helper()
	cd, err := NewCoder(m)
	if err != nil {
		t.Fatal(err)
	}
	first, end := m.Covering(off, n)
	var out []byte
	for s := first; s < end; s++ {
		pieces := make([][]byte, m.Shards())
		for i, sh := range shards {
			if sh != nil {
				pieces[i] = bytes.Clone(sh[s*m.Chunk : (s+1)*m.Chunk])
			}
		}
		if out, err = cd.Decode(out, s, pieces); err != nil {
			return nil, err
		}
	}
	lo := off - int64(first)*m.StripeSize()
	return out[lo : lo+n], nil
}

func TestRoundTrip(t *testing.T) {
	c := Config{ChunkSize: 4096}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, size := range []int{1, 63, 640, 40959, 40960, 40961, 123457} {
		data := make([]byte, size)
		for i := range data {
			data[i] = byte(rand.IntN(256))
		}
		m, shards := encodeAll(t, c, data)
		for i := range shards {
			if err := m.Verify(i, 0, shards[i]); err != nil {
				t.Fatalf("size %d shard %d: %v", size, i, err)
			}
		}
		// Any two lost (here: two data shards, the worst case).
		for _, lost := range [][]int{nil, {0}, {3, 9}, {10, 11}, {0, 11}} {
			have := make([][]byte, len(shards))
			copy(have, shards)
			for _, l := range lost {
				have[l] = nil
			}
			got, err := decodeRange(t, m, have, 0, int64(size))
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("size %d lost %v: err %v, equal %v", size, lost, err, bytes.Equal(got, data))
			}
			off := int64(size / 3)
			n := int64(size/2) + 1
			n = min(n, int64(size)-off)
			got, err = decodeRange(t, m, have, off, n)
			if err != nil || !bytes.Equal(got, data[off:off+n]) {
				t.Fatalf("size %d lost %v range %d+%d: err %v", size, lost, off, n, err)
			}
		}
		// Three lost: too few.
		have := make([][]byte, len(shards))
		copy(have, shards)
		have[1], have[2], have[11] = nil, nil, nil
		if _, err := decodeRange(t, m, have, 0, int64(size)); !errors.Is(err, ErrTooFewShards) {
			t.Fatalf("size %d, 3 lost: %v, want ErrTooFewShards", size, err)
		}
	}
}

func TestChunkFor(t *testing.T) {
	c := Config{}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		size  int64
		chunk int
	}{{10_000_000, 1_000_000}, {1, 64}, {100 << 20, 1 << 20}, {10 << 20, 1 << 20}} {
		if got := c.ChunkFor(tc.size); got != tc.chunk {
			t.Errorf("ChunkFor(%d) = %d, want %d", tc.size, got, tc.chunk)
		}
	}
	if !c.Applies(10_000_000) || c.Applies(9_999_999) || c.Applies(5<<30) {
		t.Error("Applies: threshold 10 MB, max 4 GiB")
	}
}

func TestValidate(t *testing.T) {
	for _, c := range []Config{{DataShards: -1}, {DataShards: 60, ParityShards: 5}, {ChunkSize: 100}, {Threshold: 10, MaxObject: 5}} {
		if err := c.Validate(); err == nil {
			t.Errorf("%+v validated", c)
		}
	}
	c := Config{}
	if err := c.Validate(); err != nil || c.DataShards != 10 || c.ParityShards != 2 || c.Threshold != 10_000_000 {
		t.Fatalf("defaults: %+v %v", c, err)
	}
}

func TestVerifyCatchesCorruption(t *testing.T) {
	c := Config{ChunkSize: 1024}
	_ = c.Validate()
	data := bytes.Repeat([]byte("hoard"), 9000)
	m, shards := encodeAll(t, c, data)
	bad := bytes.Clone(shards[4])
	bad[len(bad)-1] ^= 1
	if err := m.Verify(4, 0, bad); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("flipped bit: %v", err)
	}
	if err := m.Verify(5, 0, shards[4]); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("another shard's bytes: %v", err)
	}
	if err := m.Verify(4, 1, shards[4][m.Chunk:2*m.Chunk]); err != nil {
		t.Fatalf("one piece at its stripe: %v", err)
	}
	if err := m.Verify(4, 0, shards[4][:10]); !errors.Is(err, ErrBadManifest) {
		t.Fatalf("partial piece: %v", err)
	}
}

func TestManifestEncoding(t *testing.T) {
	c := Config{ChunkSize: 1024}
	_ = c.Validate()
	m, _ := encodeAll(t, c, bytes.Repeat([]byte{7}, 50000))
	got, err := ParseManifest(m.Encode())
	if err != nil {
		t.Fatal(err)
	}
	if got.Encode() != m.Encode() || got.ETag != "etag1" || got.Size != 50000 || got.Chunk != 1024 {
		t.Fatalf("round trip: %+v", got)
	}
	enc := m.Encode()
	for _, bad := range []string{"", "!!", enc[:len(enc)-4], strings.Repeat("A", MaxEncoded+1), enc + "AAAA"} {
		if _, err := ParseManifest(bad); !errors.Is(err, ErrBadManifest) {
			t.Errorf("ParseManifest(%.20q...) = %v", bad, err)
		}
	}
}

func FuzzParseManifest(f *testing.F) {
	c := Config{ChunkSize: 64}
	_ = c.Validate()
	m, _ := encodeAll(f, c, []byte("some bytes of an object"))
	f.Add(m.Encode())
	f.Fuzz(func(t *testing.T, s string) {
		m, err := ParseManifest(s)
		if err != nil {
			return
		}
		if again, err := ParseManifest(m.Encode()); err != nil || again.Encode() != m.Encode() {
			t.Fatalf("re-encoding differs: %v", err)
		}
	})
}

func TestPlace(t *testing.T) {
	var ids []string
	for i := range 14 {
		ids = append(ids, fmt.Sprintf("c%02d", i))
	}
	r, err := ring.New(ring.Config{}, ids)
	if err != nil {
		t.Fatal(err)
	}
	if Place(r, nil, "b", "k", 15) != nil {
		t.Fatal("15 shards placed on 14 members")
	}
	got := Place(r, nil, "b", "k", 12)
	seen := map[string]bool{}
	for _, id := range got {
		if seen[id] {
			t.Fatalf("member %s twice in %v", id, got)
		}
		seen[id] = true
	}
	if len(got) != 12 || got[0] != r.Owner("b", "k") {
		t.Fatalf("placement %v: want 12 members, the owner first", got)
	}
	// Four nodes: the first four shards on four nodes, and no node holds
	// more than ceil(12/4) = 3.
	nodeOf := func(id string) string { return fmt.Sprintf("n%d", (id[2]-'0')%4) }
	got = Place(r, nodeOf, "b", "k", 12)
	per := map[string]int{}
	for i, id := range got {
		per[nodeOf(id)]++
		if i < 4 && per[nodeOf(id)] > 1 {
			t.Fatalf("shard %d on a node already used: %v", i, got)
		}
	}
	for n, c := range per {
		if c > 4 {
			t.Fatalf("node %s holds %d shards of %v", n, c, got)
		}
	}
	// Agreement: the same ring built another way places alike.
	r2, _ := ring.New(ring.Config{}, append(ids[7:], ids[:7]...))
	if fmt.Sprint(Place(r2, nodeOf, "b", "k", 12)) != fmt.Sprint(got) {
		t.Fatal("two cachelets disagree on a placement")
	}
}

func TestStore(t *testing.T) {
	c := Config{ChunkSize: 1024}
	_ = c.Validate()
	data := make([]byte, 30000) // 3 stripes: shards of 3 KiB
	for i := range data {
		data[i] = byte(i * 7 / 3)
	}
	m, shards := encodeAll(t, c, data)
	enc := m.Encode()
	st := NewStore(3 * 3 * 1024)
	for i := range 3 {
		if err := st.Put(&Shard{Key: ShardKey{"b", "k", "etag1", i}, Manifest: m, Encoded: enc, Data: shards[i]}); err != nil {
			t.Fatal(err)
		}
	}
	if sh := st.Get("b", "k", "etag1"); sh == nil || sh.Key.Index != 0 {
		t.Fatalf("Get: %+v, want the lowest index", sh)
	}
	if st.Get("b", "k", "other") != nil {
		t.Fatal("another version served")
	}
	// A fourth evicts the least recently used (shard 1: 0 was just read).
	if err := st.Put(&Shard{Key: ShardKey{"b", "k", "etag1", 3}, Manifest: m, Encoded: enc, Data: shards[3]}); err != nil {
		t.Fatal(err)
	}
	if s := st.Stats(); s.Shards != 3 || s.Evicted != 1 || s.Bytes != 9*1024 {
		t.Fatalf("stats %+v", s)
	}
	// Refused: corrupt bytes, the wrong shard's bytes, a bad length, too large.
	bad := bytes.Clone(shards[5])
	bad[0] ^= 0xff
	for _, sh := range []*Shard{
		{Key: ShardKey{"b", "k", "etag1", 5}, Manifest: m, Data: bad},
		{Key: ShardKey{"b", "k", "etag1", 6}, Manifest: m, Data: shards[5]},
		{Key: ShardKey{"b", "k", "etag1", 5}, Manifest: m, Data: shards[5][:100]},
		{Key: ShardKey{"b", "k", "etag2", 5}, Manifest: m, Data: shards[5]},
	} {
		if err := st.Put(sh); err == nil {
			t.Fatalf("shard %+v kept", sh.Key)
		}
	}
	if err := NewStore(100).Put(&Shard{Key: ShardKey{"b", "k", "etag1", 0}, Manifest: m, Data: shards[0]}); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("over budget: %v", err)
	}
	// Touch reads a shard whole without reordering the eviction list, and
	// drops one that no longer verifies.
	before := st.Keys()
	if n, err := st.Touch(before[0]); err != nil || n != 3*1024 || !slices.Equal(st.Keys(), before) {
		t.Fatalf("Touch: %d, %v, order %v then %v", n, err, before, st.Keys())
	}
	st.Peek(before[1]).Data[10] ^= 1 // a fault behind the store's back
	if _, err := st.Touch(before[1]); !errors.Is(err, ErrCorrupt) || st.Peek(before[1]) != nil || st.Stats().Bytes != 6*1024 {
		t.Fatalf("Touch of a damaged shard: %v, stats %+v", err, st.Stats())
	}
	if _, err := st.Touch(before[1]); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("Touch of a dropped shard: %v", err)
	}
	if n := st.Delete("b", "k", "etag0"); n != 0 {
		t.Fatalf("Delete of another version dropped %d", n)
	}
	if n := st.Delete("b", "k", ""); n != 2 || st.Stats().Bytes != 0 || len(st.Keys()) != 0 {
		t.Fatalf("Delete dropped %d, left %+v", n, st.Stats())
	}
}

func BenchmarkEncode(b *testing.B) {
	c := Config{}
	_ = c.Validate()
	data := make([]byte, 100<<20)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		encodeAll(b, c, data)
	}
}

// BenchmarkWarmUp is the cost of one warm-up of a shard store holding
// 64 MiB (Store.Touch of every shard), next to a same-run baseline that
// only reads the same bytes once (a sum over them): warm_up_per_read is
// the ratio, and ms/64MiB what a pass costs each WarmUp interval.
func BenchmarkWarmUp(b *testing.B) {
	c := Config{ChunkSize: 1 << 20}
	_ = c.Validate()
	data := make([]byte, 80<<20) // RS(10+2): 12 shards of 8 MiB
	for i := range data {
		data[i] = byte(i * 7)
	}
	m, shards := encodeAll(b, c, data)
	enc := m.Encode()
	st := NewStore(1 << 30)
	var held int64
	for i := range 8 { // 64 MiB held
		if err := st.Put(&Shard{Key: ShardKey{"b", "k", "etag1", i}, Manifest: m, Encoded: enc, Data: shards[i]}); err != nil {
			b.Fatal(err)
		}
		held += int64(len(shards[i]))
	}
	keys := st.Keys()
	var base, warm time.Duration
	var sink uint64
	b.SetBytes(held)
	for b.Loop() {
		t0 := time.Now()
		for _, k := range keys {
			for _, v := range st.Peek(k).Data {
				sink += uint64(v)
			}
		}
		t1 := time.Now()
		for _, k := range keys {
			if _, err := st.Touch(k); err != nil {
				b.Fatal(err)
			}
		}
		base, warm = base+t1.Sub(t0), warm+time.Since(t1)
	}
	_ = sink
	b.ReportMetric(float64(warm.Milliseconds())/float64(b.N), "warmup_ms/64MiB")
	b.ReportMetric(float64(base.Milliseconds())/float64(b.N), "read_ms/64MiB")
	b.ReportMetric(float64(warm)/float64(base), "warm_up_per_read")
}
