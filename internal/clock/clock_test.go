package clock

import (
	"slices"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func TestFakeRunsTimersInOrder(t *testing.T) {
	c := NewFake(t0)
	var got []string
	c.AfterFunc(2*time.Second, func() { got = append(got, "b") })
	c.AfterFunc(time.Second, func() {
		got = append(got, "a")
		c.AfterFunc(500*time.Millisecond, func() { got = append(got, "a2") }) // due within the span
	})
	stop := c.AfterFunc(3*time.Second, func() { got = append(got, "never") })
	c.AfterFunc(2*time.Second, func() { got = append(got, "b-second") })
	c.Advance(time.Second / 2)
	if len(got) != 0 {
		t.Fatalf("ran early: %v", got)
	}
	if !stop() || stop() {
		t.Fatal("stop should prevent the call once")
	}
	c.Advance(5 * time.Second)
	want := []string{"a", "a2", "b", "b-second"}
	if len(got) != len(want) {
		t.Fatalf("ran %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("ran %v, want %v", got, want)
		}
	}
	if !c.Now().Equal(t0.Add(5500*time.Millisecond)) || c.Timers() != 0 {
		t.Fatalf("now %v timers %d", c.Now(), c.Timers())
	}
}

func TestFakeAfter(t *testing.T) {
	c := NewFake(t0)
	ch := c.After(time.Minute)
	select {
	case <-ch:
		t.Fatal("After fired before the clock moved")
	default:
	}
	c.Advance(time.Minute)
	if got := <-ch; !got.Equal(t0.Add(time.Minute)) {
		t.Fatalf("After sent %v", got)
	}
}

func TestOr(t *testing.T) {
	if _, ok := Or(nil).(realClock); !ok {
		t.Fatal("Or(nil) is not the real clock")
	}
	f := NewFake(t0)
	if Or(f) != Clock(f) {
		t.Fatal("Or(c) is not c")
	}
}

func TestFakeTieBreak(t *testing.T) {
	c := NewFake(t0)
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
