package main

import (
	"errors"
	"net"
	"syscall"
	"testing"
)

func TestInheritedListener(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	f, err := ln.(*net.TCPListener).File()
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fd, err := syscall.Dup(int(f.Fd())) // as a child inherits it; inheritedListener owns it
	if err != nil {
		t.Fatal(err)
	}
	got, err := inheritedListener(fd)
	if err != nil {
		t.Fatal(err)
	}
	defer got.Close()
	if got.Addr().String() != ln.Addr().String() {
		t.Errorf("inherited listener at %s; want %s", got.Addr(), ln.Addr())
	}
	if _, err := inheritedListener(2); !errors.Is(err, errUsage) {
		t.Errorf("fd 2: %v; want a usage error", err)
	}
}
