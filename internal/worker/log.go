package worker

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
)

// logBuf collects a log up to max bytes, counting the rest.
type logBuf struct {
	b       []byte
	max     int
	dropped int64
}

func (l *logBuf) write(p []byte) {
	if room := l.max - len(l.b); room < len(p) {
		l.dropped += int64(len(p) - max(room, 0))
		p = p[:max(room, 0)]
	}
	l.b = append(l.b, p...)
}

func (l *logBuf) String() string {
	if l.dropped == 0 {
		return string(l.b)
	}
	sep := ""
	if len(l.b) > 0 && l.b[len(l.b)-1] != '\n' {
		sep = "\n"
	}
	return fmt.Sprintf("%s%s[hoard: log truncated at %d bytes; %d bytes dropped]\n", l.b, sep, l.max, l.dropped)
}

// readLog reads one of the worker's output streams, strips the markers
// (and the empty line the worker writes before each to end a partial
// line), and hands the rest to emit.
func (w *Worker) readLog(f *os.File, stream int) {
	defer w.readers.Done()
	r := bufio.NewReaderSize(f, 64<<10)
	atStart := true    // the next fragment starts a line
	heldEmpty := false // an empty line, kept until we know it is not a marker's
	for {
		frag, err := r.ReadSlice('\n')
		if len(frag) > 0 {
			complete := frag[len(frag)-1] == '\n'
			switch {
			case atStart && complete && bytes.HasPrefix(frag, w.marker):
				heldEmpty = false
				w.marked(stream, frag[len(w.marker):len(frag)-1])
				continue
			case atStart && len(frag) == 1 && frag[0] == '\n':
				if heldEmpty {
					w.emit(frag)
				}
				heldEmpty = true
				continue
			}
			if heldEmpty {
				w.emit([]byte{'\n'})
				heldEmpty = false
			}
			w.emit(frag)
			atStart = complete
		}
		if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
			break
		}
	}
	if heldEmpty {
		w.emit([]byte{'\n'})
	}
	w.mu.Lock()
	w.ended[stream] = true
	w.checkLogDone()
	w.mu.Unlock()
}

// emit adds output to the Log and to the invocation in flight (or the
// start-up).
func (w *Worker) emit(p []byte) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cfg.Log != nil {
		_, _ = w.cfg.Log.Write(p)
	}
	if w.cur != nil {
		w.cur.log.write(p)
	}
}

// marked notes a stream's end-of-invocation marker for request hexID.
func (w *Worker) marked(stream int, hexID []byte) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if inv := w.cur; inv != nil && string(hexID) == inv.idHex {
		inv.marked[stream] = true
		w.checkLogDone()
	}
}

// checkLogDone closes the invocation's logDone once neither stream can
// add to its log. w.mu is held.
func (w *Worker) checkLogDone() {
	inv := w.cur
	if inv == nil {
		return
	}
	select {
	case <-inv.logDone:
		return
	default:
	}
	if (inv.marked[stdout] || w.ended[stdout]) && (inv.marked[stderr] || w.ended[stderr]) {
		close(inv.logDone)
	}
}
