package bench

import (
	"os"
	"testing"
	"time"
)

func TestStatCPU(t *testing.T) {
	// A command name with a space and a parenthesis; utime 250 and stime
	// 50 ticks.
	line := []byte("4242 (hoard (x) y) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 9 0 100 1000 10 0\n")
	got, err := statCPU(line)
	if err != nil || got != 3*time.Second {
		t.Fatalf("statCPU = %v, %v; want 3s", got, err)
	}
	for _, bad := range []string{"4242 hoard S 1", "4242 (hoard) S 1 2 3", "4242 (hoard) S 1 4242 4242 0 -1 4194560 100 0 0 0 x 50 0"} {
		if _, err := statCPU([]byte(bad)); err == nil {
			t.Errorf("statCPU(%q): no error", bad)
		}
	}
}

// processCPU reads this process's CPU time, which grows as it works.
func TestProcessCPU(t *testing.T) {
	before, err := processCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	for x, t0 := 0, time.Now(); ; x++ {
		if now, _ := processCPU(os.Getpid()); now > before {
			break
		}
		if time.Since(t0) > 10*time.Second {
			t.Fatalf("CPU time still %v after %d rounds of work", before, x)
		}
	}
	if _, err := processCPU(-1); err == nil {
		t.Error("processCPU(-1): no error")
	}
}
