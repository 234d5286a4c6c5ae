// Package zapslog routes the zap logs of etcd's server and client libraries
// into hoard's *slog.Logger, so that etcd stays quiet by default and, when it
// does speak, speaks through the same handler as the rest of the process.
package zapslog

import (
	"cmp"
	"context"
	"log/slog"
	"slices"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// New returns a zap logger that writes entries at or above min to l. A nil l
// gives a logger that discards everything. The logger is safe for concurrent
// use, as zap loggers are.
func New(l *slog.Logger, min slog.Level) *zap.Logger {
	if l == nil {
		return zap.NewNop()
	}
	return zap.New(&core{l: l, min: min})
}

// core is a zapcore.Core whose Write hands each entry to slog. Fields added
// with With are kept as already-converted attributes.
type core struct {
	l     *slog.Logger
	min   slog.Level
	attrs []slog.Attr
}

func level(l zapcore.Level) slog.Level {
	switch {
	case l <= zapcore.DebugLevel:
		return slog.LevelDebug
	case l == zapcore.InfoLevel:
		return slog.LevelInfo
	case l == zapcore.WarnLevel:
		return slog.LevelWarn
	default:
		return slog.LevelError
	}
}

func (c *core) Enabled(l zapcore.Level) bool {
	lv := level(l)
	return lv >= c.min && c.l.Enabled(context.Background(), lv)
}

func (c *core) With(fields []zapcore.Field) zapcore.Core {
	return &core{l: c.l, min: c.min, attrs: append(slices.Clip(c.attrs), attrs(fields)...)}
}

func (c *core) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c *core) Write(e zapcore.Entry, fields []zapcore.Field) error {
	all := append(slices.Clip(c.attrs), attrs(fields)...)
	if e.LoggerName != "" {
		all = append(all, slog.String("logger", e.LoggerName))
	}
	c.l.LogAttrs(context.Background(), level(e.Level), e.Message, all...)
	return nil
}

func (c *core) Sync() error { return nil }

// attrs converts zap fields through zap's own map encoder, which knows every
// field type (durations, errors, objects, arrays), and sorts them by key so
// that the output does not depend on map order.
func attrs(fields []zapcore.Field) []slog.Attr {
	if len(fields) == 0 {
		return nil
	}
	enc := zapcore.NewMapObjectEncoder()
	for _, f := range fields {
		f.AddTo(enc)
	}
	out := make([]slog.Attr, 0, len(enc.Fields))
	for k, v := range enc.Fields {
		out = append(out, slog.Any(k, v))
	}
	slices.SortFunc(out, func(a, b slog.Attr) int { return cmp.Compare(a.Key, b.Key) })
	return out
}
