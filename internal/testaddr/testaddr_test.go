package testaddr

import (
	"errors"
	"net"
	"syscall"
	"testing"
)

func TestRefused(t *testing.T) {
	addr := Refused(t)
	if _, err := net.Dial("tcp", addr); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial %s: %v, want connection refused", addr, err)
	}
	if l, err := net.Listen("tcp", addr); err == nil {
		l.Close()
		t.Fatalf("a listener took %s while it was held", addr)
	}
}
