package diskindex

import (
	"slices"
	"testing"
	"time"
)

func TestIndex(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	tests := []struct {
		name  string
		steps func(x *Index) []string
		want  []string
		bytes int64
	}{
		{"under budget evicts nothing", func(x *Index) []string {
			x.Put("a", 40, at(1))
			x.Put("b", 60, at(2))
			return x.Over(0)
		}, nil, 100},
		{"over budget evicts least recently used", func(x *Index) []string {
			x.Put("a", 40, at(1))
			x.Put("b", 40, at(2))
			x.Put("c", 40, at(3))
			return x.Over(0)
		}, []string{"a"}, 80},
		{"touch keeps a file", func(x *Index) []string {
			x.Put("a", 40, at(1))
			x.Put("b", 40, at(2))
			x.Touch("a", at(3))
			x.Put("c", 40, at(4))
			return x.Over(0)
		}, []string{"b"}, 80},
		{"rescan out of order keeps recency", func(x *Index) []string {
			x.Put("new", 40, at(9))
			x.Put("old", 40, at(1))
			x.Put("mid", 40, at(5))
			return x.Over(0)
		}, []string{"old"}, 80},
		{"room for an incoming file", func(x *Index) []string {
			x.Put("a", 30, at(1))
			x.Put("b", 30, at(2))
			x.Put("c", 30, at(3))
			return x.Over(50)
		}, []string{"a", "b"}, 30},
		{"replacing a file counts it once", func(x *Index) []string {
			x.Put("a", 60, at(1))
			x.Put("a", 70, at(2))
			return x.Over(0)
		}, nil, 70},
		{"older than the cutoff", func(x *Index) []string {
			x.Put("a", 10, at(1))
			x.Put("b", 10, at(5))
			x.Put("c", 10, at(9))
			return x.Older(at(6))
		}, []string{"a", "b"}, 10},
		{"a file larger than the budget goes at once", func(x *Index) []string {
			x.Put("huge", 500, at(1))
			return x.Over(0)
		}, []string{"huge"}, 0},
		{"remove", func(x *Index) []string {
			x.Put("a", 10, at(1))
			if !x.Remove("a") || x.Remove("a") || x.Has("a") {
				return []string{"remove wrong"}
			}
			return nil
		}, nil, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			x := New(100)
			got := tt.steps(x)
			if !slices.Equal(got, tt.want) {
				t.Errorf("removed %v, want %v", got, tt.want)
			}
			if x.Bytes() != tt.bytes {
				t.Errorf("bytes %d, want %d", x.Bytes(), tt.bytes)
			}
		})
	}
}
