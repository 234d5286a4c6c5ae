package cache

import "testing"

func TestReserveUploadBounded(t *testing.T) {
	for _, p := range everyPolicy() {
		t.Run(string(p), func(t *testing.T) {
			evicted := 0
			c, _ := newPolicyCache(t, p, Config{Budget: 100, MaxObjectSize: 50,
				OnEvict: func(*Entry) { evicted++ }})
			for _, k := range []string{"a", "b", "c", "d", "e"} {
				admit(t, c, complete("bk", k, 20))
			}
			// Default bound: a quarter of the budget.
			if c.ReserveUpload(30) {
				t.Fatal("ReserveUpload(30) accepted past a bound of 25")
			}
			if !c.ReserveUpload(20) {
				t.Fatal("ReserveUpload(20) refused within the bound")
			}
			if c.ReserveUpload(10) {
				t.Fatal("ReserveUpload(10) accepted beside 20 of a bound of 25")
			}
			if evicted != 1 {
				t.Fatalf("uploads evicted %d entries, want 1 (20 bytes)", evicted)
			}
			// Fills are not held to the uploads' bound.
			if !c.Reserve(30) {
				t.Fatal("Reserve(30) refused")
			}
			c.Release(30)
			if st := c.Stats(); st.Uploading != 20 || st.Reserved != 20 {
				t.Fatalf("stats %+v, want 20 uploading of 20 reserved", st)
			}
			// Once the body has arrived, its share of the bound is free.
			c.UploadDone(20)
			if !c.ReserveUpload(25) {
				t.Fatal("ReserveUpload(25) refused after UploadDone")
			}
			c.UploadDone(25)
			c.Release(25)
			c.Release(20)
			checkAccounting(t, c)
			if st := c.Stats(); st.Uploading != 0 || st.Reserved != 0 {
				t.Fatalf("stats %+v, want nothing reserved", st)
			}
		})
	}
}

func TestMaxUploadReserveValidate(t *testing.T) {
	for _, tt := range []struct {
		max  int64
		want int64
		ok   bool
	}{{0, 25, true}, {10, 10, true}, {100, 100, true}, {101, 0, false}, {-1, 0, false}} {
		cfg := Config{Budget: 100, MaxUploadReserve: tt.max}
		err := cfg.Validate()
		if (err == nil) != tt.ok || (tt.ok && cfg.MaxUploadReserve != tt.want) {
			t.Errorf("MaxUploadReserve %d: got %d, err %v", tt.max, cfg.MaxUploadReserve, err)
		}
	}
}
