// Package media reads, from the first bytes of an object, what a memory
// model wants to know about it (OFC §5.1.2): an image's width and height,
// an audio or video file's duration, a video's frame size. The cachelet
// hands it the prefix of each object written through it (Capture), so the
// features cost no second read of the object, and keeps them with the
// object's access metadata, tied to its ETag; the controller gives them to
// the invocations that read the object (docs/platform.md).
//
// It looks at MaxPrefix bytes at most, never the whole object: a format
// whose answer lies beyond them (an MP4 whose "moov" box follows its media
// data, a TIFF whose directory is at its end) yields no features. Bad or
// truncated media yields no features, never an error: Sniff's answer is a
// hint for a prediction, which treats a missing feature as a doubt.
//
// Images are read by the standard library's decoders (png, jpeg, gif)
// and golang.org/x/image's (webp, bmp, tiff), each called directly for the
// format its magic number names; nothing is registered in the image
// package's global table by this package. Audio and video durations are
// read from the one header field each container keeps them in (ISO BMFF
// "mvhd" and "tkhd", RIFF WAVE "fmt " and "data", FLAC STREAMINFO, an MP3's
// Xing/Info header or its constant bit rate); ADR 0024 says why these are
// read here rather than by a library.
//
// The package is pure: bytes in, features out; no I/O, no goroutines.
package media

import (
	"bytes"
	"errors"
	"fmt"
	"image"
	"image/gif"
	"image/jpeg"
	"image/png"
	"io"
	"math"

	"golang.org/x/image/bmp"
	"golang.org/x/image/tiff"
	"golang.org/x/image/webp"
)

// MaxPrefix is the most of an object Sniff looks at.
const MaxPrefix = 64 << 10

// Bounds on what Sniff reports: larger values are not believed (a header
// may say anything) and yield no features.
const (
	MaxSide     = 1 << 20       // pixels per side
	MaxDuration = 7 * 24 * 3600 // seconds
)

// Features are what Sniff learned of an object. The zero value is "none".
type Features struct {
	// Format names the container: png, jpeg, gif, webp, bmp, tiff, mp4,
	// mov, wav, flac, mp3.
	Format string `json:"format"`
	// Width and Height are an image's size, or a video's frame size, in
	// pixels; 0 when unknown.
	Width  int64 `json:"width,omitempty"`
	Height int64 `json:"height,omitempty"`
	// DurationS is an audio or video file's duration in seconds; 0 when
	// unknown.
	DurationS float64 `json:"duration_s,omitempty"`
}

// Pixels is Width × Height.
func (f Features) Pixels() int64 { return f.Width * f.Height }

// IsZero says Sniff found nothing.
func (f Features) IsZero() bool { return f == Features{} }

// ErrInvalid is Validate's error.
var ErrInvalid = errors.New("media: invalid features")

// formats are the names Sniff reports.
var formats = map[string]bool{"png": true, "jpeg": true, "gif": true, "webp": true, "bmp": true, "tiff": true,
	"mp4": true, "mov": true, "wav": true, "flac": true, "mp3": true}

// Validate checks features from an untrusted source (a cachelet's event):
// a known format, sides and duration within the bounds, a frame size
// given whole or not at all. Its error wraps ErrInvalid.
func (f Features) Validate() error {
	switch {
	case !formats[f.Format]:
		return fmt.Errorf("%w: format %q", ErrInvalid, f.Format)
	case f.Width < 0 || f.Height < 0 || f.Width > MaxSide || f.Height > MaxSide || (f.Width == 0) != (f.Height == 0):
		return fmt.Errorf("%w: %d×%d pixels", ErrInvalid, f.Width, f.Height)
	case math.IsNaN(f.DurationS) || f.DurationS < 0 || f.DurationS > MaxDuration:
		return fmt.Errorf("%w: a duration of %v s", ErrInvalid, f.DurationS)
	case f.Width == 0 && f.DurationS == 0:
		return fmt.Errorf("%w: neither a size nor a duration", ErrInvalid)
	}
	return nil
}

// Sniff reads an object's features from its first bytes, prefix (only
// the first MaxPrefix are looked at); size is the whole object's length
// (-1 when unknown), which bounds a duration computed from a bit rate.
// ok is false when the prefix is no media it knows, or bad, or too short.
// Safe for concurrent use; prefix is only read.
func Sniff(prefix []byte, size int64) (f Features, ok bool) {
	if len(prefix) > MaxPrefix {
		prefix = prefix[:MaxPrefix]
	}
	if size >= 0 && int64(len(prefix)) > size {
		return Features{}, false
	}
	s := sniffer(prefix)
	if s == nil {
		return Features{}, false
	}
	f, ok = s(prefix, size)
	if !ok || f.Validate() != nil {
		return Features{}, false
	}
	return f, true
}

// Known says whether a prefix of at least MagicLen bytes begins like a
// format Sniff reads: a writer can stop keeping an object's prefix when
// it does not.
func Known(prefix []byte) bool { return sniffer(prefix) != nil }

// MagicLen is how many bytes Known needs.
const MagicLen = 12

type sniffFunc func(prefix []byte, size int64) (Features, bool)

// sniffer picks the reader for a prefix by its magic number.
func sniffer(p []byte) sniffFunc {
	has := func(off int, magic string) bool {
		return len(p) >= off+len(magic) && string(p[off:off+len(magic)]) == magic
	}
	switch {
	case has(0, "\x89PNG\r\n\x1a\n"):
		return imageOf("png", png.DecodeConfig)
	case has(0, "\xff\xd8\xff"):
		return imageOf("jpeg", jpeg.DecodeConfig)
	case has(0, "GIF87a"), has(0, "GIF89a"):
		return imageOf("gif", gif.DecodeConfig)
	case has(0, "RIFF") && has(8, "WEBP"):
		return imageOf("webp", webp.DecodeConfig)
	case has(0, "BM"):
		return imageOf("bmp", bmp.DecodeConfig)
	case has(0, "II*\x00"), has(0, "MM\x00*"):
		return imageOf("tiff", tiff.DecodeConfig)
	case has(0, "RIFF") && has(8, "WAVE"):
		return sniffWAV
	case has(0, "fLaC"):
		return sniffFLAC
	case has(4, "ftyp"), has(4, "moov"), has(4, "mdat"), has(4, "wide"), has(4, "free"):
		return sniffMP4
	case has(0, "ID3"), len(p) >= 2 && p[0] == 0xff && p[1]&0xe0 == 0xe0:
		return sniffMP3
	}
	return nil
}

// imageOf reads an image's size with a decoder's DecodeConfig, which
// reads the header only.
func imageOf(format string, decode func(io.Reader) (image.Config, error)) sniffFunc {
	return func(p []byte, _ int64) (f Features, ok bool) {
		// A decoder that panics on bad input is a bad image, not a
		// failed write.
		defer func() {
			if recover() != nil {
				f, ok = Features{}, false
			}
		}()
		cfg, err := decode(bytes.NewReader(p))
		if err != nil || cfg.Width <= 0 || cfg.Height <= 0 {
			return Features{}, false
		}
		return Features{Format: format, Width: int64(cfg.Width), Height: int64(cfg.Height)}, true
	}
}
