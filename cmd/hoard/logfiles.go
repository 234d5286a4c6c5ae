package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
)

// componentLogs writes each component's logs of `hoard up` to a file of
// its own under a directory (DIR/logs: controller.log, agent.log, ...), so
// the terminal keeps the progress lines and the report. Records at the
// level given and above go to the files; errors also go to the terminal,
// so a failure is never silent there, until Quiet (at shutdown, when
// parts stopping under each other's feet report errors that are none).
// Its methods may be called concurrently.
type componentLogs struct {
	dir   string
	level slog.Level
	echo  slog.Handler // errors, to the terminal
	quiet atomic.Bool  // no more echo

	mu       sync.Mutex
	files    map[string]*os.File
	handlers map[string]slog.Handler
}

func newComponentLogs(dir string, level slog.Level, terminal io.Writer) (*componentLogs, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	return &componentLogs{
		dir: dir, level: level,
		echo:     slog.NewTextHandler(terminal, &slog.HandlerOptions{Level: slog.LevelError}),
		files:    map[string]*os.File{},
		handlers: map[string]slog.Handler{},
	}, nil
}

// handler returns the handler writing to name.log, opening it (for
// appending) on first use; a file that cannot be opened leaves only the
// terminal's errors.
func (c *componentLogs) handler(name string) slog.Handler {
	c.mu.Lock()
	defer c.mu.Unlock()
	if h, ok := c.handlers[name]; ok {
		return h
	}
	var h slog.Handler = slog.DiscardHandler
	if f, err := os.OpenFile(filepath.Join(c.dir, name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600); err == nil {
		c.files[name] = f
		h = slog.NewTextHandler(f, &slog.HandlerOptions{Level: c.level})
	}
	h = teeHandler{file: h, echo: c.echo.WithAttrs([]slog.Attr{slog.String("log", name)}), quiet: &c.quiet}
	c.handlers[name] = h
	return h
}

// logger returns a logger writing to name.log.
func (c *componentLogs) logger(name string) *slog.Logger { return slog.New(c.handler(name)) }

// router returns a logger for code that names its components itself
// (log.With("component", X), as package rig does): each component's
// records go to the file routes names for it, the rest to fallback.log.
func (c *componentLogs) router(routes map[string]string, fallback string) *slog.Logger {
	return slog.New(routeHandler{c: c, routes: routes, fallback: fallback})
}

// Quiet stops echoing errors to the terminal; the files still get them.
func (c *componentLogs) Quiet() { c.quiet.Store(true) }

// Close closes the files; loggers used after it write nothing.
func (c *componentLogs) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var errs []error
	for name, f := range c.files {
		errs = append(errs, f.Close())
		c.handlers[name] = slog.DiscardHandler
	}
	clear(c.files)
	return errors.Join(errs...)
}

// teeHandler writes to a file and echoes errors unless quiet.
type teeHandler struct {
	file, echo slog.Handler
	quiet      *atomic.Bool
}

func (t teeHandler) echoes(ctx context.Context, l slog.Level) bool {
	return !t.quiet.Load() && t.echo.Enabled(ctx, l)
}

func (t teeHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return t.file.Enabled(ctx, l) || t.echoes(ctx, l)
}

func (t teeHandler) Handle(ctx context.Context, r slog.Record) error {
	var errs []error
	if t.file.Enabled(ctx, r.Level) {
		errs = append(errs, t.file.Handle(ctx, r.Clone()))
	}
	if t.echoes(ctx, r.Level) {
		errs = append(errs, t.echo.Handle(ctx, r))
	}
	return errors.Join(errs...)
}

func (t teeHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return teeHandler{file: t.file.WithAttrs(as), echo: t.echo.WithAttrs(as), quiet: t.quiet}
}

func (t teeHandler) WithGroup(name string) slog.Handler {
	return teeHandler{file: t.file.WithGroup(name), echo: t.echo.WithGroup(name), quiet: t.quiet}
}

// routeHandler picks a file by the "component" attribute a logger is
// given with With; until one is named, records go to the fallback file.
type routeHandler struct {
	c        *componentLogs
	routes   map[string]string
	fallback string
	attrs    []slog.Attr
}

func (h routeHandler) target() slog.Handler {
	return h.c.handler(h.fallback).WithAttrs(h.attrs)
}

func (h routeHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.target().Enabled(ctx, l)
}

func (h routeHandler) Handle(ctx context.Context, r slog.Record) error {
	return h.target().Handle(ctx, r)
}

func (h routeHandler) WithAttrs(as []slog.Attr) slog.Handler {
	all := append(slices.Clip(h.attrs), as...)
	for _, a := range as {
		if a.Key != "component" {
			continue
		}
		name, ok := h.routes[a.Value.String()]
		if !ok {
			name = h.fallback
		}
		return h.c.handler(name).WithAttrs(all)
	}
	h.attrs = all
	return h
}

func (h routeHandler) WithGroup(name string) slog.Handler {
	return h.target().WithGroup(name)
}
