package cache

import "testing"

// TestReserveFillBounded: fills in progress hold at most MaxFillReserve
// together, beyond the first, which may be any admissible object; a
// finished fill's share is free again.
func TestReserveFillBounded(t *testing.T) {
	for _, p := range everyPolicy() {
		t.Run(string(p), func(t *testing.T) {
			evicted := 0
			c, _ := newPolicyCache(t, p, Config{Budget: 100, MaxObjectSize: 50,
				OnEvict: func(*Entry) { evicted++ }})
			for _, k := range []string{"a", "b", "c", "d", "e"} {
				admit(t, c, complete("bk", k, 20))
			}
			// Alone, a fill of any admissible object starts.
			if !c.ReserveFill(40) {
				t.Fatal("ReserveFill(40) refused with no other fill")
			}
			// Default bound: a quarter of the budget.
			if c.ReserveFill(10) {
				t.Fatal("ReserveFill(10) accepted beside 40 of a bound of 25")
			}
			if evicted != 2 {
				t.Fatalf("fills evicted %d entries, want 2 (40 bytes)", evicted)
			}
			c.FillDone(40)
			if st := c.Stats(); st.Filling != 0 || st.Reserved != 40 {
				t.Fatalf("stats %+v, want 0 filling of 40 reserved", st)
			}
			if !c.ReserveFill(20) || c.ReserveFill(10) {
				t.Fatal("a fill of 20 and then 10 more: want the first, not the second (bound 25)")
			}
			if !c.ReserveFill(5) {
				t.Fatal("ReserveFill(5) refused within the bound")
			}
			if st := c.Stats(); st.Filling != 25 {
				t.Fatalf("stats %+v, want 25 filling", st)
			}
			c.FillDone(20)
			c.FillDone(5)
			c.Release(20)
			c.Release(5)
			c.Release(40)
			checkAccounting(t, c)
			if st := c.Stats(); st.Filling != 0 || st.Reserved != 0 {
				t.Fatalf("stats %+v, want nothing reserved", st)
			}
		})
	}
}

func TestMaxFillReserveValidate(t *testing.T) {
	for _, tt := range []struct {
		max  int64
		want int64
		ok   bool
	}{{0, 25, true}, {10, 10, true}, {100, 100, true}, {101, 0, false}, {-1, 0, false}} {
		cfg := Config{Budget: 100, MaxFillReserve: tt.max}
		err := cfg.Validate()
		if (err == nil) != tt.ok || (tt.ok && cfg.MaxFillReserve != tt.want) {
			t.Errorf("MaxFillReserve %d: got %d, err %v", tt.max, cfg.MaxFillReserve, err)
		}
	}
}
