package ctl

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/holdfast-db/holdfast/internal/lifecycle"
)

// TopOptions configures CLI.Top.
type TopOptions struct {
	Interval   time.Duration // between snapshots; must be > 0
	Tags       int           // tag rows per frame; 0 means all active tags
	Holders    int           // holder rows per frame; 0 means none
	Iterations int           // frames to print; 0 means until ctx ends
}

// clearScreen moves the cursor home and clears the terminal.
const clearScreen = "\x1b[H\x1b[2J"

// Top prints a frame per interval: the pool, the tags by the backend
// connections they held on average over the interval, and the longest
// holders. The first frame comes one interval after the first snapshot.
// It returns nil when ctx ends (Ctrl-C), the first snapshot's error if that
// fails, and otherwise the last frame's error, if any: a failed refresh is
// shown in its frame and the next one measures from the last good snapshot.
func (c *CLI) Top(ctx context.Context, o TopOptions) error {
	if o.Interval <= 0 {
		return usagef("top: -interval %v must be positive", o.Interval)
	}
	if o.Tags < 0 || o.Holders < 0 || o.Iterations < 0 {
		return usagef("top: -n, -holders and -iterations must not be negative")
	}
	now, sleep := c.Now, c.Sleep
	if now == nil {
		now = time.Now
	}
	if sleep == nil {
		sleep = lifecycle.Sleep
	}
	prev, err := c.snapshot(ctx, now)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	if c.Terminal {
		fmt.Fprintf(c.Out, "%sholdfast top: measuring %s for %v...\n", clearScreen, c.Client.Addr(), o.Interval)
	}
	var lastErr error
	for i := 0; o.Iterations == 0 || i < o.Iterations; i++ {
		if sleep(ctx, o.Interval) != nil {
			return nil
		}
		cur, err := c.snapshot(ctx, now)
		if ctx.Err() != nil {
			return nil
		}
		var frame strings.Builder
		if c.Terminal {
			frame.WriteString(clearScreen)
		} else if i > 0 {
			frame.WriteByte('\n')
		}
		if lastErr = err; err != nil {
			fmt.Fprintf(&frame, "holdfast %s  %s  error: %v\nretrying every %v\n",
				c.Client.Addr(), now().Format(time.TimeOnly), err, o.Interval)
		} else {
			renderTop(&frame, c.Client.Addr(), prev, cur, o, c.Width)
			prev = cur
		}
		if _, err := io.WriteString(c.Out, frame.String()); err != nil {
			return err
		}
	}
	return lastErr
}

// snapshot is one refresh of top.
type snapshot struct {
	at      time.Time // when the tag counters arrived
	tags    TagList
	pool    Pool
	holders []Holder
}

func (c *CLI) snapshot(ctx context.Context, now func() time.Time) (snapshot, error) {
	var s snapshot
	var err error
	if s.tags, err = c.Client.Tags(ctx); err != nil {
		return s, err
	}
	s.at = now()
	if s.pool, err = c.Client.Pool(ctx); err != nil {
		return s, err
	}
	s.holders, err = c.Client.Holders(ctx)
	return s, err
}

// TagRate is one tag's activity between two snapshots of GET /api/tags.
type TagRate struct {
	Tag string
	// Held is the tag's hold seconds per second of wall time: the average
	// number of backend connections it held over the interval.
	Held float64
	// Share is Held over the sum of Held of all tags (0..1); 0 when no tag
	// held anything.
	Share float64
	// Wait is wait seconds per second: the average number of the tag's
	// borrowers waiting for a connection.
	Wait float64
	// Hold is the interval's hold seconds, open holds included (see
	// WithInFlight); Finished those of holds that ended, and Exec and
	// IdleInTxn the parts of Finished spent executing and idle inside a
	// transaction.
	Hold, Finished, Exec, IdleInTxn float64
	Statements                      float64 // per second
	Errors                          int64   // in the interval
	HeldNow                         int
	// Oldest is the age in seconds of the tag's longest hold now (0: none).
	Oldest  float64
	Drained bool
	Limit   int
}

// active reports whether the tag did or holds anything, or is controlled.
func (r TagRate) active() bool {
	return r.Hold > 0 || r.Wait > 0 || r.Statements > 0 || r.Errors > 0 || r.HeldNow > 0 || r.Drained || r.Limit > 0
}

// Rates compares two snapshots of the tag counters taken elapsed apart
// (elapsed must be > 0). The counters count finished holds only; give
// Rates tags passed through WithInFlight to count open ones too. A tag absent from prev counts from zero; a counter
// that went down (holdfast restarted) counts from zero too. The result is
// sorted by Held, then HeldNow and Wait, largest first, then by tag.
func Rates(prev, cur []Tag, elapsed time.Duration) []TagRate {
	sec := elapsed.Seconds()
	before := make(map[string]Tag, len(prev))
	for _, t := range prev {
		before[t.Tag] = t
	}
	out := make([]TagRate, 0, len(cur))
	total := 0.0
	for _, t := range cur {
		p := before[t.Tag]
		r := TagRate{
			Tag:        t.Tag,
			Hold:       delta(t.HoldSeconds+t.InFlightSeconds, p.HoldSeconds+p.InFlightSeconds),
			Finished:   delta(t.HoldSeconds, p.HoldSeconds),
			Exec:       delta(t.ExecSeconds, p.ExecSeconds),
			IdleInTxn:  delta(t.IdleInTransactionSeconds, p.IdleInTransactionSeconds),
			Wait:       delta(t.WaitSeconds, p.WaitSeconds) / sec,
			Statements: float64(delta(t.Statements, p.Statements)) / sec,
			Errors:     delta(t.Errors, p.Errors),
			HeldNow:    t.HeldNow,
			Drained:    t.Drained,
			Limit:      t.Limit,
		}
		r.Held = r.Hold / sec
		total += r.Held
		out = append(out, r)
	}
	for i := range out {
		if total > 0 {
			out[i].Share = out[i].Held / total
		}
	}
	slices.SortFunc(out, func(a, b TagRate) int {
		return cmp.Or(cmp.Compare(b.Held, a.Held), cmp.Compare(b.HeldNow, a.HeldNow),
			cmp.Compare(b.Wait, a.Wait), strings.Compare(a.Tag, b.Tag))
	})
	return out
}

// WithInFlight returns tags with InFlightSeconds set to the age of each
// tag's holds in flight (from holders, read at the same time), adding rows
// for the holders' tags that have none yet. The change of HoldSeconds +
// InFlightSeconds between two snapshots is the hold time within the
// interval, open transactions included: a hold that ends in it adds its
// whole length to HoldSeconds and drops its earlier age from the in-flight
// part.
func WithInFlight(tags []Tag, holders []Holder) []Tag {
	out := slices.Clone(tags)
	at := make(map[string]int, len(out))
	for i, t := range out {
		at[t.Tag] = i
	}
	for _, h := range holders {
		i, ok := at[h.Tag]
		if !ok {
			i = len(out)
			at[h.Tag] = i
			out = append(out, Tag{Tag: h.Tag})
		}
		out[i].InFlightSeconds += h.HeldForSeconds
	}
	return out
}

// delta is how much a counter grew from prev to cur; one that went down
// (holdfast restarted) counts from zero.
func delta[N int64 | float64](cur, prev N) N {
	if cur < prev {
		return cur
	}
	return cur - prev
}

// renderTop writes one frame comparing prev and cur.
func renderTop(b *strings.Builder, addr string, prev, cur snapshot, o TopOptions, width int) {
	elapsed := cur.at.Sub(prev.at)
	if elapsed <= 0 { // a clock step; a frame with made-up rates beats none
		elapsed = o.Interval
	}
	span := elapsed.Round(100 * time.Millisecond).String()
	p, q := cur.pool, prev.pool
	fmt.Fprintf(b, "holdfast %s  %s  rates over the last %s\n", addr, cur.at.Format(time.TimeOnly), span)
	waiting := strconv.Itoa(p.Waiting)
	if p.WaitingTagLimit+p.WaitingPipeline > 0 {
		waiting += fmt.Sprintf(" (%d for the pool, %d under tag limits, %d for a pipeline)",
			p.WaitingPool, p.WaitingTagLimit, p.WaitingPipeline)
	}
	fmt.Fprintf(b, "pool  open %d  in use %d  idle %d  waiting %s  max %d  clients %d  pinned %d\n",
		p.Open, p.InUse, p.Idle, waiting, p.Max, p.Clients, p.PinnedSessions)
	fmt.Fprintf(b, "      last %s: %d acquired, %d waited, %d timeouts, %d rejected\n\n", span,
		delta(p.Acquired, q.Acquired), delta(p.Waited, q.Waited), delta(p.Timeouts, q.Timeouts),
		delta(p.Rejected, q.Rejected))

	rates := Rates(WithInFlight(prev.tags.Tags, prev.holders), WithInFlight(cur.tags.Tags, cur.holders), elapsed)
	oldest := map[string]float64{}
	for _, h := range cur.holders {
		oldest[h.Tag] = max(oldest[h.Tag], h.HeldForSeconds)
	}
	t := table{cols: []column{
		{name: "TAG"}, {name: "AVG HELD", right: true}, {name: "SHARE %", right: true},
		{name: "HELD NOW", right: true}, {name: "OLDEST", right: true}, {name: "AVG WAITING", right: true}, {name: "EXEC %", right: true},
		{name: "IDLE-IN-TXN %", right: true}, {name: "STMTS/s", right: true}, {name: "ERRORS", right: true},
		{name: "STATE"},
	}}
	var sumHeld, sumWait float64
	sumNow, idle, hidden := 0, 0, 0
	for _, r := range rates {
		r.Oldest = oldest[r.Tag]
		sumHeld, sumWait, sumNow = sumHeld+r.Held, sumWait+r.Wait, sumNow+r.HeldNow
		switch {
		case !r.active():
			idle++
		case o.Tags > 0 && len(t.rows) >= o.Tags:
			hidden++
		default:
			t.add(clean(r.Tag), fmtRate(r.Held), fmtPct(r.Share, 1), strconv.Itoa(r.HeldNow), fmtOldest(r.Oldest), fmtRate(r.Wait),
				fmtPct(r.Exec, r.Finished), fmtPct(r.IdleInTxn, r.Finished), fmtPerSec(r.Statements), itoa(r.Errors),
				state(r.Drained, r.Limit))
		}
	}
	if len(t.rows) == 0 {
		b.WriteString("no tag held, waited for or ran anything in the interval\n")
	} else {
		t.add("TOTAL", fmtRate(sumHeld), fmtPct(sumHeld, sumHeld), strconv.Itoa(sumNow), "", fmtRate(sumWait), "", "", "", "", "")
		_ = t.write(b, 0) // a strings.Builder does not fail
	}
	var notes []string
	if hidden > 0 {
		notes = append(notes, plural(hidden, "more active tag")+" not shown (-n)")
	}
	if idle > 0 {
		notes = append(notes, plural(idle, "idle tag")+" not shown")
	}
	if d := cur.tags.Folded - prev.tags.Folded; d > 0 {
		notes = append(notes, fmt.Sprintf("%s folded into \"other\"", plural(int(d), "new tag name")))
	}
	if len(notes) > 0 {
		b.WriteString("(" + strings.Join(notes, "; ") + ")\n")
	}
	fmt.Fprintf(b, "AVG HELD: connections held on average (hold s per s, open transactions included; pool max %d).\n", p.Max)
	b.WriteString("OLDEST: the tag's longest hold now. AVG WAITING: borrowers waiting on average\n")
	if o.Holders > 0 {
		b.WriteString("\nLONGEST HOLDERS\n")
		_ = writeHolders(b, cur.holders, o.Holders, width)
	}
}

// fmtOldest is a hold's age for the OLDEST column; "-" for none.
func fmtOldest(sec float64) string {
	if sec <= 0 {
		return "-"
	}
	return fmtHeld(sec)
}
