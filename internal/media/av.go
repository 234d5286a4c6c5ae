package media

import (
	"encoding/binary"
)

// Audio and video: each container keeps its duration in one header field
// near its start; these read that field and nothing else.

// sniffMP4 reads an ISO BMFF file (MP4, MOV, M4A): the movie header
// ("moov/mvhd": timescale and duration) and the first track header with a
// frame size ("moov/trak/tkhd": width and height, 16.16 fixed point). A
// file whose "moov" follows its media data (not "fast start") has it
// beyond the prefix: no features.
func sniffMP4(p []byte, _ int64) (Features, bool) {
	f := Features{Format: "mp4"}
	moov, found := []byte(nil), false
	for b := range boxes(p) {
		switch b.typ {
		case "ftyp":
			if len(b.body) >= 4 && string(b.body[:4]) == "qt  " {
				f.Format = "mov"
			}
		case "moov":
			moov, found = b.body, true
		}
		if found {
			break
		}
	}
	if !found {
		return Features{}, false
	}
	for b := range boxes(moov) {
		switch b.typ {
		case "mvhd":
			d, ok := mvhdDuration(b.body)
			if !ok {
				return Features{}, false
			}
			f.DurationS = d
		case "trak":
			if f.Width != 0 {
				continue
			}
			for t := range boxes(b.body) {
				if t.typ == "tkhd" {
					f.Width, f.Height = tkhdSize(t.body)
				}
			}
		}
	}
	return f, f.DurationS > 0 || f.Width > 0
}

type box struct {
	typ  string
	body []byte
}

// boxes yields the boxes of p in order, stopping at the first that does
// not fit in p (a truncated box is never read).
func boxes(p []byte) func(yield func(box) bool) {
	return func(yield func(box) bool) {
		for len(p) >= 8 {
			size := uint64(binary.BigEndian.Uint32(p))
			typ, hdr := string(p[4:8]), uint64(8)
			switch size {
			case 0: // to the end of the file: only if that is here
				size = uint64(len(p))
			case 1:
				if len(p) < 16 {
					return
				}
				size, hdr = binary.BigEndian.Uint64(p[8:]), 16
			}
			if size < hdr || size > uint64(len(p)) {
				return
			}
			if !yield(box{typ, p[hdr:size]}) {
				return
			}
			p = p[size:]
		}
	}
}

// mvhdDuration is a movie header's duration in seconds.
func mvhdDuration(b []byte) (float64, bool) {
	var scale uint32
	var dur uint64
	switch {
	case len(b) >= 20 && b[0] == 0:
		scale, dur = binary.BigEndian.Uint32(b[12:]), uint64(binary.BigEndian.Uint32(b[16:]))
	case len(b) >= 32 && b[0] == 1:
		scale, dur = binary.BigEndian.Uint32(b[20:]), binary.BigEndian.Uint64(b[24:])
	default:
		return 0, false
	}
	if scale == 0 || dur == 0 || dur == 0xffffffff && b[0] == 0 || dur == ^uint64(0) {
		return 0, false // an unknown duration
	}
	return float64(dur) / float64(scale), true
}

// tkhdSize is a track header's frame size (0×0 for an audio track).
func tkhdSize(b []byte) (w, h int64) {
	off := 76 // version 0: 4 flags, 20 times and ids, 8 reserved, 8 layer..volume, 36 matrix
	if len(b) > 0 && b[0] == 1 {
		off = 88
	}
	if len(b) < off+8 {
		return 0, 0
	}
	w, h = int64(binary.BigEndian.Uint32(b[off:])>>16), int64(binary.BigEndian.Uint32(b[off+4:])>>16)
	if w == 0 || h == 0 {
		return 0, 0
	}
	return w, h
}

// sniffWAV reads a RIFF WAVE file: the byte rate from "fmt ", the length
// from "data" (bounded by the object's size: a header may claim more than
// the file holds, and a streamed one claims 0 or 0xffffffff).
func sniffWAV(p []byte, size int64) (Features, bool) {
	var rate uint32
	off := 12
	for off+8 <= len(p) {
		id, n := string(p[off:off+4]), int64(binary.LittleEndian.Uint32(p[off+4:]))
		body := off + 8
		switch id {
		case "fmt ":
			if n < 16 || int64(body)+16 > int64(len(p)) {
				return Features{}, false
			}
			rate = binary.LittleEndian.Uint32(p[body+8:])
		case "data":
			if rate == 0 {
				return Features{}, false
			}
			if size >= 0 {
				if left := size - int64(body); n == 0 || n == 0xffffffff || n > left {
					n = left
				}
			}
			if n <= 0 || n == 0xffffffff {
				return Features{}, false
			}
			return Features{Format: "wav", DurationS: float64(n) / float64(rate)}, true
		}
		next := int64(body) + n + n&1
		if next > int64(len(p)) {
			return Features{}, false
		}
		off = int(next)
	}
	return Features{}, false
}

// sniffFLAC reads a FLAC file's STREAMINFO block, always the first:
// sample rate (20 bits) and total samples (36 bits, 0 when unknown).
func sniffFLAC(p []byte, _ int64) (Features, bool) {
	// "fLaC", a 4-byte block header of type 0 (STREAMINFO) and length 34.
	if len(p) < 8+34 || p[4]&0x7f != 0 || int(p[5])<<16|int(p[6])<<8|int(p[7]) != 34 {
		return Features{}, false
	}
	si := p[8:]
	v := binary.BigEndian.Uint64(si[10:18])
	rate, total := v>>44, v&(1<<36-1)
	if rate == 0 || total == 0 {
		return Features{}, false
	}
	return Features{Format: "flac", DurationS: float64(total) / float64(rate)}, true
}

// MPEG audio layer III: bit rates (kbit/s) by index for MPEG-1 and for
// MPEG-2/2.5, sample rates (Hz) for MPEG-1 (halved for 2, quartered for
// 2.5).
var (
	mp3Rates1   = [16]int64{0, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 0}
	mp3Rates2   = [16]int64{0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160, 0}
	mp3Samples1 = [4]int64{44100, 48000, 32000, 0}
)

// mp3Frame is one MPEG-1/2/2.5 layer III frame header.
type mp3Frame struct {
	mpeg1      bool
	mono       bool
	bitrate    int64 // bit/s
	sampleRate int64
	length     int64 // bytes, header included
}

func parseMP3Frame(h []byte) (mp3Frame, bool) {
	if len(h) < 4 || h[0] != 0xff || h[1]&0xe0 != 0xe0 {
		return mp3Frame{}, false
	}
	version, layer := h[1]>>3&3, h[1]>>1&3
	if version == 1 || layer != 1 { // reserved version; layer III only
		return mp3Frame{}, false
	}
	var f mp3Frame
	f.mpeg1 = version == 3
	bi, si := h[2]>>4, h[2]>>2&3
	f.sampleRate = mp3Samples1[si]
	if f.mpeg1 {
		f.bitrate = mp3Rates1[bi] * 1000
	} else {
		f.bitrate = mp3Rates2[bi] * 1000
		f.sampleRate /= 2
		if version == 0 {
			f.sampleRate /= 2
		}
	}
	if f.bitrate == 0 || f.sampleRate == 0 {
		return mp3Frame{}, false
	}
	f.mono = h[3]>>6 == 3
	coeff := int64(144)
	if !f.mpeg1 {
		coeff = 72
	}
	f.length = coeff*f.bitrate/f.sampleRate + int64(h[2]>>1&1)
	return f, f.length > 4
}

// sniffMP3 reads an MP3 file: past an ID3v2 tag, the first frame and the
// one after it (two frames in a row tell MPEG audio from bytes that only
// look like a header), then the frame count of a Xing/Info header if the
// first frame has one, else the duration at the first frame's constant
// bit rate over the object's size (unknown size: no features).
func sniffMP3(p []byte, size int64) (Features, bool) {
	off := int64(0)
	if len(p) >= 10 && string(p[:3]) == "ID3" {
		n := int64(p[6]&0x7f)<<21 | int64(p[7]&0x7f)<<14 | int64(p[8]&0x7f)<<7 | int64(p[9]&0x7f)
		off = 10 + n
		if p[5]&0x10 != 0 {
			off += 10 // a footer
		}
	}
	if off+4 > int64(len(p)) {
		return Features{}, false
	}
	fr, ok := parseMP3Frame(p[off:])
	if !ok {
		return Features{}, false
	}
	if next := off + fr.length; next+4 > int64(len(p)) {
		return Features{}, false
	} else if _, ok := parseMP3Frame(p[next:]); !ok {
		return Features{}, false
	}
	side := int64(32)
	switch {
	case fr.mpeg1 && fr.mono, !fr.mpeg1 && !fr.mono:
		side = 17
	case !fr.mpeg1 && fr.mono:
		side = 9
	}
	spf := int64(1152)
	if !fr.mpeg1 {
		spf = 576
	}
	x := off + 4 + side
	if x+12 <= int64(len(p)) && (string(p[x:x+4]) == "Xing" || string(p[x:x+4]) == "Info") {
		if flags := binary.BigEndian.Uint32(p[x+4:]); flags&1 != 0 {
			frames := int64(binary.BigEndian.Uint32(p[x+8:]))
			if frames == 0 {
				return Features{}, false
			}
			return Features{Format: "mp3", DurationS: float64(frames*spf) / float64(fr.sampleRate)}, true
		}
	}
	if size <= off {
		return Features{}, false
	}
	return Features{Format: "mp3", DurationS: float64(size-off) * 8 / float64(fr.bitrate)}, true
}
