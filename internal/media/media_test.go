package media_test

import (
	"bytes"
	"image"
	"image/color/palette"
	"image/gif"
	"image/jpeg"
	"io"
	"math"
	"testing"
	"testing/iotest"

	"golang.org/x/image/bmp"
	"golang.org/x/image/tiff"

	"github.com/hoard-io/hoard/internal/media"
	"github.com/hoard-io/hoard/internal/media/mediatest"
)

func encode(t testing.TB, enc func(io.Writer, image.Image) error, w, h int) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := enc(&b, image.NewRGBA(image.Rect(0, 0, w, h))); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// webpLossless is a VP8L header for a w×h image (what DecodeConfig reads).
func webpLossless(w, h int) []byte {
	v := uint32(w-1) | uint32(h-1)<<14
	chunk := []byte{0x2f, byte(v), byte(v >> 8), byte(v >> 16), byte(v >> 24), 0, 0, 0}
	b := []byte("RIFF")
	b = append(b, byte(12+len(chunk)), 0, 0, 0)
	b = append(b, "WEBPVP8L"...)
	b = append(b, byte(len(chunk)), 0, 0, 0)
	return append(b, chunk...)
}

type sample struct {
	name string
	data []byte
	size int64 // -1: len(data)
	want media.Features
}

func samples(t testing.TB) []sample {
	jpg := func(w io.Writer, m image.Image) error { return jpeg.Encode(w, m, nil) }
	gf := func(w io.Writer, m image.Image) error {
		return gif.Encode(w, image.NewPaletted(m.Bounds(), palette.Plan9), nil)
	}
	mp3 := mediatest.MP3(100, 300)
	return []sample{
		{"png", mediatest.PNG(640, 480), -1, media.Features{Format: "png", Width: 640, Height: 480}},
		{"jpeg", encode(t, jpg, 300, 200), -1, media.Features{Format: "jpeg", Width: 300, Height: 200}},
		{"gif", encode(t, gf, 17, 9), -1, media.Features{Format: "gif", Width: 17, Height: 9}},
		{"bmp", encode(t, bmp.Encode, 33, 21), -1, media.Features{Format: "bmp", Width: 33, Height: 21}},
		{"tiff", encode(t, func(w io.Writer, m image.Image) error { return tiff.Encode(w, m, nil) }, 40, 30), -1,
			media.Features{Format: "tiff", Width: 40, Height: 30}},
		{"webp", webpLossless(1920, 1080), -1, media.Features{Format: "webp", Width: 1920, Height: 1080}},
		{"mp4", mediatest.MP4("isom", 1000, 12500, 1280, 720, 4096), -1,
			media.Features{Format: "mp4", Width: 1280, Height: 720, DurationS: 12.5}},
		{"mov", mediatest.MP4("qt  ", 600, 1800, 0, 0, 10), -1, media.Features{Format: "mov", DurationS: 3}},
		// The header's lengths, bounded by the object's: only a prefix
		// is handed in, the rest is the object's size.
		{"wav", mediatest.WAV(8000, 1, 3)[:1000], 44 + 8000*2*3, media.Features{Format: "wav", DurationS: 3}},
		{"flac", mediatest.FLAC(44100, 44100*7, 100), -1, media.Features{Format: "flac", DurationS: 7}},
		// 100 frames at 128 kbit/s: 41,700 bytes, 2.606 s at that rate.
		{"mp3", mp3, -1, media.Features{Format: "mp3", DurationS: float64(len(mp3)-310) * 8 / 128000}},
	}
}

func TestSniff(t *testing.T) {
	for _, s := range samples(t) {
		t.Run(s.name, func(t *testing.T) {
			size := s.size
			if size < 0 {
				size = int64(len(s.data))
			}
			got, ok := media.Sniff(s.data, size)
			if !ok || got != s.want {
				t.Fatalf("Sniff: %+v %v, want %+v", got, ok, s.want)
			}
			// Through a Capture, one byte at a time: the same.
			c := media.NewCapture(iotest.OneByteReader(bytes.NewReader(s.data)))
			if n, err := io.Copy(io.Discard, c); err != nil || n != int64(len(s.data)) {
				t.Fatalf("copy: %d %v", n, err)
			}
			if got, ok := c.Features(size); !ok || got != s.want {
				t.Errorf("Capture: %+v %v, want %+v", got, ok, s.want)
			}
			// Truncated: never features other than these.
			for _, n := range []int{0, 1, 7, 11, 12, 20, len(s.data) / 2} {
				if got, ok := media.Sniff(s.data[:n], size); ok && got != s.want {
					t.Errorf("truncated to %d: %+v", n, got)
				}
			}
		})
	}
}

func TestSniffRejects(t *testing.T) {
	mp4 := mediatest.MP4("isom", 1000, 5000, 0, 0, 0)
	late := append(mediatest.Box("ftyp", []byte("isom\x00\x00\x00\x00")), mediatest.Box("mdat", make([]byte, media.MaxPrefix))...)
	late = append(late, mp4[24:]...) // moov after the media data
	huge := mediatest.MP4("isom", 1, 1<<31, 0, 0, 0)
	for name, c := range map[string]struct {
		data []byte
		size int64
	}{
		"text":               {[]byte("hello, world, this is not media"), 31},
		"png header only":    {mediatest.PNG(10, 10)[:16], 100},
		"moov past 64 KiB":   {late, int64(len(late))},
		"a week and more":    {huge, int64(len(huge))},
		"zero timescale":     {mediatest.MP4("isom", 0, 5000, 0, 0, 0), 200},
		"wav without data":   {mediatest.WAV(8000, 1, 0)[:36], 36},
		"flac of 0 samples":  {mediatest.FLAC(44100, 0, 0), 42},
		"mp3 one frame":      {mediatest.MP3(1, 0), 417},
		"prefix beyond size": {mediatest.PNG(10, 10), 5},
	} {
		if got, ok := media.Sniff(c.data, c.size); ok {
			t.Errorf("%s: %+v", name, got)
		}
	}
	// A capture of something else keeps nothing past the magic.
	c := media.NewCapture(bytes.NewReader(bytes.Repeat([]byte("x"), 1<<20)))
	if _, err := io.Copy(io.Discard, c); err != nil {
		t.Fatal(err)
	}
	if _, ok := c.Features(1 << 20); ok {
		t.Error("features of x's")
	}
	// A large image's capture stops at MaxPrefix.
	big := append(mediatest.PNG(50, 50), make([]byte, 4*media.MaxPrefix)...)
	allocs := testing.AllocsPerRun(5, func() {
		c := media.NewCapture(bytes.NewReader(big))
		_, _ = io.Copy(io.Discard, c)
	})
	if allocs > 10 {
		t.Errorf("%v allocations capturing a large image", allocs)
	}
}

func TestValidate(t *testing.T) {
	for _, f := range []media.Features{
		{}, {Format: "exe", Width: 1, Height: 1}, {Format: "png", Width: 1}, {Format: "png", Width: -1, Height: -1},
		{Format: "png", Width: media.MaxSide + 1, Height: 1}, {Format: "mp4", DurationS: math.NaN()},
		{Format: "mp4", DurationS: -1}, {Format: "mp4", DurationS: media.MaxDuration + 1}, {Format: "mp4"},
	} {
		if f.Validate() == nil {
			t.Errorf("%+v passed", f)
		}
	}
	if err := (media.Features{Format: "mp4", Width: 2, Height: 2, DurationS: 1}).Validate(); err != nil {
		t.Error(err)
	}
}

// FuzzSniff: whatever the bytes, Sniff returns valid features or none,
// never panics, and a Capture of them agrees with it.
func FuzzSniff(f *testing.F) {
	for _, s := range samples(f) {
		f.Add(s.data[:min(len(s.data), 4096)], s.size)
	}
	f.Fuzz(func(t *testing.T, data []byte, size int64) {
		got, ok := media.Sniff(data, size)
		if ok && got.Validate() != nil {
			t.Fatalf("invalid features %+v", got)
		}
		if !ok && !got.IsZero() {
			t.Fatalf("features %+v without ok", got)
		}
		c := media.NewCapture(bytes.NewReader(data))
		if _, err := io.Copy(io.Discard, c); err != nil {
			t.Fatal(err)
		}
		if cg, cok := c.Features(size); cok != ok || cg != got {
			t.Fatalf("capture %+v %v, sniff %+v %v", cg, cok, got, ok)
		}
	})
}

// BenchmarkCapture: what keeping a write's first bytes and sniffing them
// adds to streaming the body, beside the bare stream (run both, compare
// ns/op): a 1 MiB PNG and 1 MiB of something else.
func BenchmarkCapture(b *testing.B) {
	png := append(mediatest.PNG(1000, 1000), make([]byte, 1<<20)...)[:1<<20]
	other := bytes.Repeat([]byte("not media "), 1<<20/10)
	buf := make([]byte, 32<<10)
	for _, body := range []struct {
		name string
		data []byte
	}{{"png", png}, {"other", other}} {
		b.Run(body.name+"/bare", func(b *testing.B) {
			b.SetBytes(int64(len(body.data)))
			b.ReportAllocs()
			for b.Loop() {
				_, _ = io.CopyBuffer(io.Discard, struct{ io.Reader }{bytes.NewReader(body.data)}, buf)
			}
		})
		b.Run(body.name+"/capture", func(b *testing.B) {
			b.SetBytes(int64(len(body.data)))
			b.ReportAllocs()
			for b.Loop() {
				c := media.NewCapture(bytes.NewReader(body.data))
				_, _ = io.CopyBuffer(io.Discard, struct{ io.Reader }{c}, buf)
				c.Features(int64(len(body.data)))
			}
		})
	}
}
