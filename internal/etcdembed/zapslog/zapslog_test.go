package zapslog

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
)

func TestLevelsAndFields(t *testing.T) {
	var buf bytes.Buffer
	l := New(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})), slog.LevelWarn)
	l.Info("chatty", zap.String("k", "v"))
	l.With(zap.String("member", "m1")).Named("raft").Warn("slow apply",
		zap.Duration("took", 150*time.Millisecond), zap.Error(errors.New("boom")), zap.Int("n", 3))
	l.Error("bad")
	out := buf.String()
	if strings.Contains(out, "chatty") {
		t.Errorf("info entry passed a warn threshold:\n%s", out)
	}
	for _, want := range []string{
		`level=WARN msg="slow apply" member=m1 error=boom n=3 took=150ms logger=raft`,
		`level=ERROR msg=bad`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestNilLogger(t *testing.T) {
	New(nil, slog.LevelDebug).Error("dropped") // must not panic
}
