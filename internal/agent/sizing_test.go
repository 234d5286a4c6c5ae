package agent

import "testing"

// TestSlackPool: loans never exceed what is free, and returns never grow
// the pool past its size.
func TestSlackPool(t *testing.T) {
	p := &slackPool{size: 100, free: 100}
	if n := p.take(60); n != 60 || p.Free() != 40 {
		t.Fatalf("take 60: lent %d, %d free", n, p.Free())
	}
	if n := p.take(60); n != 40 || p.Free() != 0 {
		t.Fatalf("take 60 of 40: lent %d, %d free", n, p.Free())
	}
	if n := p.take(10); n != 0 {
		t.Fatalf("an empty pool lent %d", n)
	}
	if n := p.take(-5); n != 0 || p.Free() != 0 {
		t.Fatalf("a negative loan: %d, %d free", n, p.Free())
	}
	p.give(70)
	p.give(70)
	if p.Free() != 100 {
		t.Fatalf("%d free after returns, want the pool's 100", p.Free())
	}
}
