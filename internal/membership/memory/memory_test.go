package memory

import (
	"testing"
	"time"

	"github.com/hoard-io/hoard/internal/clock"
	"github.com/hoard-io/hoard/internal/membership"
	"github.com/hoard-io/hoard/internal/membership/membershiptest"
)

func TestConformance(t *testing.T) {
	membershiptest.Run(t, func(t *testing.T) membershiptest.Harness {
		clock := clock.NewFake(time.Unix(0, 0))
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
