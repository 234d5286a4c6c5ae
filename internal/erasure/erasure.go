// Package erasure stores large objects as Reed-Solomon shards spread over
// an application's cachelets [InfiniCache]: the layout of an object in
// stripes, the coding of one stripe, the manifest that names every piece's
// checksum, the placement of shards on distinct members (distinct nodes
// where membership tells them), and the bounded in-memory store of the
// shards a cachelet holds for its peers.
//
// Layout. An object of Size bytes is cut into stripes of Data*Chunk bytes
// (the last one zero-padded); each stripe is coded into Data+Parity pieces
// of Chunk bytes. Shard i is piece i of every stripe, one after the other,
// so a ranged read fetches from each shard only the stripes its range
// covers. Chunk is at most Config.ChunkSize and smaller for small objects
// (Size/Data rounded up to 64 bytes), so a 10 MB object is 12 shards of
// 1 MB, not of a full chunk.
//
// Integrity. The manifest carries the CRC32C of every piece of every shard.
// A holder checks the pieces it is given against it before keeping them,
// and a reader checks every piece it receives before decoding; a reader
// decodes only from shards whose manifests are identical. A piece that
// fails is a missing shard, never wrong bytes.
//
// The package does no I/O and starts no goroutines of its own (the coder,
// github.com/klauspost/reedsolomon, may use several for one large stripe).
package erasure

import (
	"errors"
	"fmt"
)

// Defaults of Config [InfiniCache: RS(10+2), objects over 10 MB].
const (
	DefaultDataShards   = 10
	DefaultParityShards = 2
	DefaultThreshold    = 10_000_000
	DefaultChunkSize    = 1 << 20
	DefaultMaxObject    = 4 << 30
)

// MaxShards bounds Data+Parity (the coder's own limit is 256).
const MaxShards = 64

// Errors.
var (
	// ErrTooFewShards: fewer than Data shards could be had, so the object
	// cannot be decoded (a miss, served from the store).
	ErrTooFewShards = errors.New("erasure: fewer shards than needed to decode")
	// ErrCorrupt: a piece does not match the manifest's checksum.
	ErrCorrupt = errors.New("erasure: piece does not match its checksum")
	// ErrBadManifest: a manifest does not parse or does not fit its shard.
	ErrBadManifest = errors.New("erasure: invalid manifest")
)

// Config is an application's erasure coding.
type Config struct {
	// DataShards (k) and ParityShards (r): an object survives the loss of
	// any r of its k+r shards. Defaults 10 and 2 [InfiniCache].
	DataShards   int `yaml:"data_shards"`
	ParityShards int `yaml:"parity_shards"`
	// Threshold: objects of at least this many bytes are sharded. Default
	// 10 MB (10,000,000 bytes).
	Threshold int64 `yaml:"threshold"`
	// ChunkSize is the most bytes one shard takes of one stripe; a stripe
	// holds DataShards*ChunkSize bytes of the object, and is what a ranged
	// read fetches at least. Default 1 MiB.
	ChunkSize int `yaml:"chunk_size"`
	// MaxObject: larger objects are not sharded (they stream from the
	// store). Bounds the manifest (one checksum per piece). Default 4 GiB.
	MaxObject int64 `yaml:"max_object"`
}

// Validate checks c and fills in the defaults.
func (c *Config) Validate() error {
	if c.DataShards < 0 || c.ParityShards < 0 || c.Threshold < 0 || c.ChunkSize < 0 || c.MaxObject < 0 {
		return errors.New("erasure: shard counts and sizes must not be negative")
	}
	if c.DataShards == 0 {
		c.DataShards = DefaultDataShards
	}
	if c.ParityShards == 0 {
		c.ParityShards = DefaultParityShards
	}
	if c.Threshold == 0 {
		c.Threshold = DefaultThreshold
	}
	if c.ChunkSize == 0 {
		c.ChunkSize = DefaultChunkSize
	}
	if c.MaxObject == 0 {
		c.MaxObject = DefaultMaxObject
	}
	if c.DataShards+c.ParityShards > MaxShards {
		return fmt.Errorf("erasure: %d data + %d parity shards is more than %d", c.DataShards, c.ParityShards, MaxShards)
	}
	if c.ChunkSize%64 != 0 || c.ChunkSize > 64<<20 {
		return fmt.Errorf("erasure: chunk size %d must be a multiple of 64 bytes, at most 64 MiB", c.ChunkSize)
	}
	if c.MaxObject < c.Threshold {
		return fmt.Errorf("erasure: max object %d is below the threshold %d", c.MaxObject, c.Threshold)
	}
	return nil
}

// Shards is k+r.
func (c Config) Shards() int { return c.DataShards + c.ParityShards }

// Applies says whether an object of size bytes is sharded.
func (c Config) Applies(size int64) bool { return size >= c.Threshold && size <= c.MaxObject }

// ChunkFor is the chunk of an object of size bytes: ChunkSize, or less for
// an object smaller than a stripe (size/DataShards rounded up to 64).
func (c Config) ChunkFor(size int64) int {
	per := (size + int64(c.DataShards) - 1) / int64(c.DataShards)
	per = (per + 63) &^ 63
	if per < 64 {
		per = 64
	}
	return int(min(per, int64(c.ChunkSize)))
}
