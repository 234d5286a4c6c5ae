package memory

import (
	"slices"
	"testing"
	"time"

	"github.com/hoard-io/hoard/internal/membership"
	"github.com/hoard-io/hoard/internal/membership/membershiptest"
)

func TestConformance(t *testing.T) {
	membershiptest.Run(t, func(t *testing.T) membershiptest.Harness {
		clock := NewFakeClock()
		r, err := New(Config{TTL: 5 * time.Second, Clock: clock})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close() })
		return membershiptest.Harness{
			Registry: r,
			TTL:      r.TTL(),
			Advance:  clock.Advance,
			Crash:    r.Crash,
			Expire:   r.Expire,
			Close:    func() { r.Close() },
		}
	})
}

func TestFakeClockOrder(t *testing.T) {
	c := NewFakeClock()
	var got []int
	c.AfterFunc(3*time.Second, func() { got = append(got, 3) })
	stop := c.AfterFunc(2*time.Second, func() { got = append(got, 2) })
	c.AfterFunc(time.Second, func() {
		got = append(got, 1)
		c.AfterFunc(time.Second, func() { got = append(got, 12) }) // due at 2 s, after the 2 s timer set earlier
	})
	c.AfterFunc(time.Second, func() { got = append(got, 11) })
	c.Advance(2 * time.Second)
	if want := []int{1, 11, 2, 12}; !slices.Equal(got, want) {
		t.Fatalf("ran %v, want %v", got, want)
	}
	if stop() {
		t.Error("stop of a timer that ran reported true")
	}
	c.Advance(time.Second)
	if want := []int{1, 11, 2, 12, 3}; !slices.Equal(got, want) {
		t.Fatalf("ran %v, want %v", got, want)
	}
}

func TestDefaults(t *testing.T) {
	r, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if r.TTL() != membership.DefaultTTL {
		t.Errorf("TTL() = %v, want %v", r.TTL(), membership.DefaultTTL)
	}
	if _, err := New(Config{TTL: -1}); err == nil {
		t.Error("New with a negative TTL succeeded")
	}
}
