package cachelet

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/hoard-io/hoard/internal/store"
)

// BenchmarkRemoteHitLarge measures the peer path of a large object: a
// remote hit at a cachelet that does not own the key (its copy dropped
// before each read; the owner sends the object from memory, the reader
// keeps a verified copy), read in process into io.Discard, against a
// loopback TCP copy of as many bytes in the same loop (1 MiB writes, reads
// into a 256 KiB buffer, as `hoard bench access`'s tcp target does):
//
//	go test -run XXX -bench RemoteHitLarge -benchtime 8x ./internal/cachelet
//
// It reports each p50, tcp/remote (issue 14's target: >= 0.8 at 256 MiB),
// the process's CPU time (user + system) per read of each, and the minor
// page faults per remote read (mean, and median: the first read of a run
// fills memory the process never had).
func BenchmarkRemoteHitLarge(b *testing.B) {
	for _, size := range []int{16 << 20, 256 << 20} {
		for _, pool := range []string{"", "/pooled"} {
			b.Run(fmt.Sprintf("%dMiB%s", size>>20, pool), func(b *testing.B) {
				s, _ := ParseConsistency("owner")
				g := newGroup(b, 2, s.Apply, func(cfg *Config) {
					cfg.Cache.Budget, cfg.Cache.MaxObjectSize = 3*int64(size)+64<<20, int64(size)
					if pool != "" {
						cfg.Cache.PoolBytes = int64(size) + 1<<20
					}
				})
				data := object("k", 1, size)
				if _, err := g.st.Put(b.Context(), testBucket, "k", bytes.NewReader(data), int64(size), store.PutOptions{}); err != nil {
					b.Fatal(err)
				}
				if _, err := io.Copy(io.Discard, mustGet(b, g.members[0])); err != nil { // the owner holds it
					b.Fatal(err)
				}
				tcp := startByteServer(b)
				conn, err := net.Dial("tcp", tcp)
				if err != nil {
					b.Fatal(err)
				}
				defer conn.Close()
				buf := make([]byte, 256<<10)
				reader := g.members[1]
				var remote, copies []time.Duration
				var remoteCPU, tcpCPU time.Duration
				var remoteFaults []time.Duration // counts, sorted as p50 sorts
				b.SetBytes(int64(size))
				for b.Loop() {
					reader.Invalidate(testBucket, "k")
					c0, f0, start := cpuTime(), pageFaults(), time.Now()
					obj, err := reader.Get(b.Context(), testBucket, "k", nil)
					if err != nil {
						b.Fatal(err)
					}
					n, err := io.Copy(io.Discard, obj.Body)
					obj.Body.Close()
					remote = append(remote, time.Since(start))
					remoteCPU += cpuTime() - c0
					remoteFaults = append(remoteFaults, time.Duration(pageFaults()-f0))
					if err != nil || n != int64(size) || obj.Outcome != RemoteHit {
						b.Fatalf("remote read: %d bytes, %v, outcome %s", n, err, obj.Outcome)
					}

					c0, start = cpuTime(), time.Now()
					var hdr [8]byte
					binary.BigEndian.PutUint64(hdr[:], uint64(size))
					if _, err := conn.Write(hdr[:]); err != nil {
						b.Fatal(err)
					}
					for left := size; left > 0; {
						m, err := conn.Read(buf[:min(left, len(buf))])
						if err != nil {
							b.Fatal(err)
						}
						left -= m
					}
					copies = append(copies, time.Since(start))
					tcpCPU += cpuTime() - c0
				}
				r, t := p50(remote), p50(copies)
				b.ReportMetric(float64(r.Microseconds())/1e3, "remote-p50-ms")
				b.ReportMetric(float64(t.Microseconds())/1e3, "tcp-p50-ms")
				b.ReportMetric(float64(t)/float64(r), "tcp/remote")
				b.ReportMetric(float64(remoteCPU.Microseconds())/1e3/float64(len(remote)), "remote-cpu-ms")
				b.ReportMetric(float64(tcpCPU.Microseconds())/1e3/float64(len(copies)), "tcp-cpu-ms")
				var faults time.Duration
				for _, f := range remoteFaults {
					faults += f
				}
				b.ReportMetric(float64(faults)/float64(len(remote)), "remote-faults")
				b.ReportMetric(float64(p50(remoteFaults)), "remote-faults-p50")
			})
		}
	}
}

// startByteServer serves, per 8-byte big-endian request, that many bytes
// in writes of 1 MiB, on loopback, until the benchmark ends.
func startByteServer(b *testing.B) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ln.Close() })
	chunk := make([]byte, 1<<20)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				var hdr [8]byte
				for {
					if _, err := io.ReadFull(c, hdr[:]); err != nil {
						return
					}
					for n := int(binary.BigEndian.Uint64(hdr[:])); n > 0; {
						w, err := c.Write(chunk[:min(n, len(chunk))])
						if err != nil {
							return
						}
						n -= w
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// cpuTime is the process's CPU time so far, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// pageFaults is the process's minor page faults so far.
func pageFaults() int64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return ru.Minflt
}
