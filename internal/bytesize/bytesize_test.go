package bytesize

import "testing"

func TestParse(t *testing.T) {
	for in, want := range map[string]int64{
		"0": 0, "1500000": 1500000, "512MiB": 512 << 20, "2GiB": 2 << 30, "1.5KiB": 1536,
		"10MB": 10e6, "64M": 64 << 20, " 3 GiB ": 3 << 30, "7B": 7,
	} {
		got, err := Parse(in)
		if err != nil || got != want {
			t.Errorf("Parse(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "MiB", "-1", "1XB", "abc", "9999999TiB"} {
		if _, err := Parse(in); err == nil {
			t.Errorf("Parse(%q): no error", in)
		}
	}
}

func TestFormat(t *testing.T) {
	for n, want := range map[int64]string{0: "0B", 1024: "1KiB", 256 << 20: "256MiB", 3 << 30: "3GiB", 1000: "1000B"} {
		if got := Format(n); got != want {
			t.Errorf("Format(%d) = %q; want %q", n, got, want)
		}
		if n != 0 {
			if back, _ := Parse(Format(n)); back != n {
				t.Errorf("round trip of %d gave %d", n, back)
			}
		}
	}
}

func TestHuman(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1536: "1.5 KiB", 35 << 20: "35.0 MiB", 3 << 40: "3.0 TiB"} {
		if got := Human(n); got != want {
			t.Errorf("Human(%d) = %q; want %q", n, got, want)
		}
	}
}
