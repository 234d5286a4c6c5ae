// Package mediatest makes small media files for tests: images encoded by
// the standard library, and audio and video containers written header by
// header, with the sizes and durations a test asks for.
package mediatest

import (
	"bytes"
	"encoding/binary"
	"image"
	"image/png"
)

// PNG is a w×h PNG image (w, h > 0).
func PNG(w, h int) []byte {
	var b bytes.Buffer
	if err := png.Encode(&b, image.NewGray(image.Rect(0, 0, w, h))); err != nil {
		panic(err) // a gray image in memory always encodes
	}
	return b.Bytes()
}

// Box is an ISO BMFF box of type typ around body.
func Box(typ string, body ...[]byte) []byte {
	n := 8
	for _, b := range body {
		n += len(b)
	}
	out := binary.BigEndian.AppendUint32(make([]byte, 0, n), uint32(n))
	out = append(out, typ...)
	for _, b := range body {
		out = append(out, b...)
	}
	return out
}

// MP4 is a fast-start MP4 file of duration ticks at timescale ticks per
// second with one video track of w×h pixels (no track when w is 0) and
// mdat bytes of media data after the movie header.
func MP4(brand string, timescale, duration uint32, w, h uint32, mdat int) []byte {
	ftyp := Box("ftyp", []byte(brand), []byte{0, 0, 2, 0}, []byte(brand))
	mvhd := make([]byte, 100) // version 0
	binary.BigEndian.PutUint32(mvhd[12:], timescale)
	binary.BigEndian.PutUint32(mvhd[16:], duration)
	moov := [][]byte{Box("mvhd", mvhd)}
	if w > 0 {
		tkhd := make([]byte, 84) // version 0
		binary.BigEndian.PutUint32(tkhd[76:], w<<16)
		binary.BigEndian.PutUint32(tkhd[80:], h<<16)
		moov = append(moov, Box("trak", Box("tkhd", tkhd)))
	}
	return append(append(ftyp, Box("moov", moov...)...), Box("mdat", make([]byte, mdat))...)
}

// WAV is a PCM WAVE file: 16-bit samples at rate Hz on channels, of
// seconds' worth of silence.
func WAV(rate, channels, seconds int) []byte {
	data := rate * channels * 2 * seconds
	le := binary.LittleEndian
	b := []byte("RIFF")
	b = le.AppendUint32(b, uint32(36+data))
	b = append(b, "WAVEfmt "...)
	b = le.AppendUint32(b, 16)
	b = le.AppendUint16(b, 1)
	b = le.AppendUint16(b, uint16(channels))
	b = le.AppendUint32(b, uint32(rate))
	b = le.AppendUint32(b, uint32(rate*channels*2))
	b = le.AppendUint16(b, uint16(channels*2))
	b = le.AppendUint16(b, 16)
	b = append(b, "data"...)
	b = le.AppendUint32(b, uint32(data))
	return append(b, make([]byte, data)...)
}

// FLAC is a FLAC stream's header: the magic and a STREAMINFO block of
// samples at rate Hz, followed by pad bytes standing for the frames.
func FLAC(rate, samples uint64, pad int) []byte {
	b := []byte("fLaC")
	b = append(b, 0x80, 0, 0, 34) // last block, STREAMINFO, 34 bytes
	si := make([]byte, 34)
	binary.BigEndian.PutUint64(si[10:], rate<<44|1<<41|15<<36|samples&(1<<36-1)) // stereo, 16 bits
	return append(append(b, si...), make([]byte, pad)...)
}

// MP3 is frames MPEG-1 layer III frames at 128 kbit/s, 44.1 kHz, stereo,
// behind an ID3v2 tag of tag bytes (none when 0).
func MP3(frames, tag int) []byte {
	var b []byte
	if tag > 0 {
		b = append(b, 'I', 'D', '3', 4, 0, 0, byte(tag>>21&0x7f), byte(tag>>14&0x7f), byte(tag>>7&0x7f), byte(tag&0x7f))
		b = append(b, make([]byte, tag)...)
	}
	frame := make([]byte, 417) // 144 * 128000 / 44100
	copy(frame, []byte{0xff, 0xfb, 0x90, 0x04})
	for range frames {
		b = append(b, frame...)
	}
	return b
}
