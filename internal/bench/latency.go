package bench

import (
	"context"
	"fmt"
	"io"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/holdfast-db/holdfast/internal/rawmysql"
)

// LatencyOptions configures the one-client latency comparison: one
// connection per target, statements sent one at a time, taking turns
// between the targets (direct, relay, holdfast, then the next statement
// starting from the next target), so every target sees the same moments of
// a noisy machine. A round is PerRound statements on each target.
type LatencyOptions struct {
	Endpoints []Endpoint // Endpoints[0] is the baseline (direct)
	Database  string
	Rounds    int
	PerRound  int
	Warmup    int // statements on each target before the first round
	Query     func(i, k int) string
}

// LatencyRound is one round's percentiles per target, in Endpoints order.
type LatencyRound struct {
	P50, P99 []time.Duration
}

// LatencyReport is what RunLatency measured.
type LatencyReport struct {
	Targets []string
	Rounds  []LatencyRound
	Queries int // statements timed on each target
}

// RunLatency runs the comparison. Each statement is timed from just before
// its packet is written to the last byte of its reply.
func RunLatency(ctx context.Context, o LatencyOptions) (*LatencyReport, error) {
	n := len(o.Endpoints)
	if n < 2 || o.Rounds < 1 || o.PerRound < 1 || o.Query == nil {
		return nil, fmt.Errorf("bench: latency run needs two endpoints, rounds, statements per round and a query")
	}
	clients := make([]*rawmysql.Conn, n)
	defer func() {
		for _, c := range clients {
			if c != nil {
				c.Close()
			}
		}
	}()
	rep := &LatencyReport{}
	for i, ep := range o.Endpoints {
		c, err := ep.Dial(ctx, o.Database)
		if err != nil {
			return nil, fmt.Errorf("bench: latency: %s: %w", ep.Name, err)
		}
		clients[i] = c
		rep.Targets = append(rep.Targets, ep.Name)
	}
	run := func(t, k int) (time.Duration, error) {
		q := o.Query(0, k)
		// A hang guard on a hop that stops answering, not a timing.
		_ = clients[t].SetDeadline(time.Now().Add(time.Minute))
		start := time.Now()
		if _, err := clients[t].Query(q); err != nil {
			return 0, fmt.Errorf("bench: latency: %s: %q: %w", o.Endpoints[t].Name, q, err)
		}
		return time.Since(start), nil
	}
	k := 0
	for range o.Warmup {
		for t := range n {
			if _, err := run(t, k); err != nil {
				return nil, err
			}
		}
		k++
	}
	times := make([][]time.Duration, n)
	for range o.Rounds {
		for t := range times {
			times[t] = times[t][:0]
		}
		for range o.PerRound {
			if err := ctx.Err(); err != nil {
				return rep, err
			}
			for j := range n {
				t := (j + k) % n // who goes first rotates
				d, err := run(t, k)
				if err != nil {
					return rep, err
				}
				times[t] = append(times[t], d)
			}
			k++
		}
		var r LatencyRound
		for t := range n {
			slices.Sort(times[t])
			r.P50 = append(r.P50, percentile(times[t], 0.50))
			r.P99 = append(r.P99, percentile(times[t], 0.99))
		}
		rep.Rounds = append(rep.Rounds, r)
		rep.Queries += o.PerRound
	}
	return rep, nil
}

// Added is the median over rounds of what target t adds to the baseline's
// p50 and p99 in the same round.
func (r *LatencyReport) Added(t int) (p50, p99 time.Duration) {
	var a50, a99 []float64
	for _, x := range r.Rounds {
		a50 = append(a50, float64(x.P50[t]-x.P50[0]))
		a99 = append(a99, float64(x.P99[t]-x.P99[0]))
	}
	return time.Duration(Median(a50)), time.Duration(Median(a99))
}

// Median is the median over rounds of target t's p50 and p99.
func (r *LatencyReport) Median(t int) (p50, p99 time.Duration) {
	var m50, m99 []float64
	for _, x := range r.Rounds {
		m50 = append(m50, float64(x.P50[t]))
		m99 = append(m99, float64(x.P99[t]))
	}
	return time.Duration(Median(m50)), time.Duration(Median(m99))
}

// Print writes the table and the verdict: holdfast's added p50 (the
// target named holdfast) no more than the relay's.
func (r *LatencyReport) Print(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "target\tp50 µs\tp99 µs\tadded p50 µs\tadded p99 µs\t added p50 per round (µs)\t")
	us := func(d time.Duration) string { return fmt.Sprintf("%.1f", float64(d)/float64(time.Microsecond)) }
	for t, name := range r.Targets {
		p50, p99 := r.Median(t)
		a50, a99 := r.Added(t)
		var per []byte
		for _, x := range r.Rounds {
			per = fmt.Appendf(per, " %s", us(x.P50[t]-x.P50[0]))
		}
		if t == 0 {
			fmt.Fprintf(tw, "%s\t%s\t%s\t-\t-\t baseline\t\n", name, us(p50), us(p99))
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t\n", name, us(p50), us(p99), us(a50), us(a99), per)
	}
	tw.Flush()
	hf, relay := slices.Index(r.Targets, TargetHoldfast), slices.Index(r.Targets, TargetRelay)
	if hf <= 0 || relay <= 0 {
		return
	}
	h50, _ := r.Added(hf)
	r50, _ := r.Added(relay)
	word := "PASS"
	if h50 > r50 {
		word = "MISS"
	}
	fmt.Fprintf(w, "%s point_select@1   holdfast adds p50 %s µs over direct, the relay %s µs (target: no more than the relay; medians of %d paired rounds of %d statements each)\n",
		word, us(h50), us(r50), len(r.Rounds), r.Queries/max(len(r.Rounds), 1))
}
