package netrelay

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"time"
)

// chunkSize is the largest read a delayed direction makes at once.
const chunkSize = 32 << 10

var chunkPool = sync.Pool{New: func() any { b := make([]byte, chunkSize); return &b }}

type chunk struct {
	buf *[]byte
	n   int
	due time.Time
	cut bool // CutWhen chose it: cut the relay once it is written
}

// errCut ends the copy loop that wrote the chunk CutWhen chose.
var errCut = errors.New("netrelay: cut")

// delayCopy copies src to dst writing each chunk delay after it was read,
// in order, and cuts the relay after a chunk cutWhen (if not nil) chose. It
// returns nil when src reaches EOF and everything read has been written.
// Reads carry a deadline at the oldest queued chunk's due time, so the one
// goroutine wakes either for new data or to write; while the relay is
// stalled it neither reads nor writes.
func (r *Relay) delayCopy(l *link, dst, src net.Conn, delay time.Duration, cutWhen func([]byte) bool) (err error) {
	var q []chunk
	defer func() {
		for _, c := range q {
			chunkPool.Put(c.buf)
		}
	}()
	var wk *waker // nil (no wake-ups) without a delay
	if delay > 0 {
		wk = r.waker()
	}
	var woken time.Time // the due time last handed to wk
	// write sends the oldest chunk, once due.
	write := func() error {
		if r.stalled.Load() && !r.waitResumed(l) {
			return errDropped
		}
		c := q[0]
		q = q[1:]
		if d := time.Until(c.due); d > 0 {
			wk.at(c.due)
			time.Sleep(d)
		}
		late := time.Since(c.due)
		if c.cut {
			// Nothing Target answers to this chunk may reach the client
			// (the cut would race the answer): the client's side is
			// closed for writing before the chunk goes out, and the
			// client reads the end of its connection.
			if cw, ok := l.client.(interface{ CloseWrite() error }); ok {
				_ = cw.CloseWrite()
			}
		}
		_, werr := dst.Write((*c.buf)[:c.n])
		chunkPool.Put(c.buf)
		r.chunks.Add(1)
		r.late.Add(int64(late))
		if werr == nil && c.cut {
			r.Cut()
			return errCut
		}
		return werr
	}
	for {
		if r.stalled.Load() && !r.waitResumed(l) {
			return errDropped
		}
		now := time.Now()
		for len(q) > 0 && !q[0].due.After(now) {
			if err := write(); err != nil {
				return err
			}
			now = time.Now()
		}
		var deadline time.Time
		if len(q) > 0 {
			deadline = q[0].due
			if !deadline.Equal(woken) {
				wk.at(deadline)
				woken = deadline
			}
		}
		if err := src.SetReadDeadline(deadline); err != nil {
			return err
		}
		if r.stalled.Load() {
			continue // a Stall since the check: its deadline is undone
		}
		buf := chunkPool.Get().(*[]byte)
		n, rerr := src.Read(*buf)
		if n > 0 {
			c := chunk{buf: buf, n: n, due: time.Now().Add(delay)}
			c.cut = cutWhen != nil && cutWhen((*buf)[:n])
			q = append(q, c)
		} else {
			chunkPool.Put(buf)
		}
		switch {
		case rerr == nil:
		case errors.Is(rerr, os.ErrDeadlineExceeded):
			// A queued chunk is due, or a Stall: the loop sees to both.
		case errors.Is(rerr, io.EOF):
			for len(q) > 0 {
				if err := write(); err != nil {
					return err
				}
			}
			return nil
		default:
			return rerr
		}
	}
}
