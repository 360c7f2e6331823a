package chaos

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/holdfast-db/holdfast/internal/holdfastproc"
)

// The controls scenario: on-call controls change through the fleet's
// admin APIs while instances are killed and backend connections cut.
// Clients tag their calls: even ones tagControlled... see tagOf. The
// controller drains and undrains tagDrained (sometimes with an expiry)
// and caps tagCapped fleet-wide, each change through a random live
// instance. Besides the usual judgement, every refusal must be true: a
// 9001 only for the drained tag while a drain may have been in force, a
// 9002 only for the capped tag while a cap may have been, no call of the
// drained tag answered while a drain was certainly in force on every
// instance, and no instance whose clients call the capped tag starved
// (checkShares).

const (
	tagDrained = "chaos_cart"     // drained and undrained by the controller
	tagCapped  = "chaos_checkout" // capped fleet-wide by the controller
)

// Control codes: refused by a drain, or by a wait under a cap that ran
// out; nothing was done (the client retries).
const (
	codeTagDrained = 9001
	codeTagLimit   = 9002
)

// tagOf is client i's tag in the controls scenario.
func tagOf(i int) string {
	if i%2 == 0 {
		return tagDrained
	}
	return tagCapped
}

// controlBound is how long a control change takes to be in force on every
// live instance after the admin API answered: one fleet poll (1 s), and
// one more for a poll that failed because its connection was cut.
const controlBound = 3 * time.Second

// window is a span in which a control may have been in force somewhere
// (from the start of the request that set it until the answer of the one
// that lifted it, plus controlBound), and the part of it in which it
// certainly was in force everywhere (from the setting answer plus
// controlBound until the start of the lifting request; empty when the
// setting request failed).
type window struct {
	mayFrom, mayUntil   time.Time
	sureFrom, sureUntil time.Time
}

// controlLog is what the controller did, per control ("drain", "limit").
type controlLog struct {
	mu   sync.Mutex
	wins map[string][]window
	open map[string]*window // set (or maybe set) and not lifted yet
}

func (l *controlLog) set(kind string, start, end time.Time, ok bool, expires time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open == nil {
		l.open, l.wins = map[string]*window{}, map[string][]window{}
	}
	l.supersedeLocked(kind, start)
	w := l.open[kind]
	if w == nil {
		w = &window{mayFrom: start}
		l.open[kind] = w
	}
	if ok && w.sureFrom.IsZero() {
		w.sureFrom = end.Add(controlBound)
	}
	if ok && expires > 0 {
		// It lifts itself: the database's clock counts from the write,
		// between start and end.
		w.mayUntil = end.Add(expires + controlBound)
		w.sureUntil = start.Add(expires)
		l.wins[kind] = append(l.wins[kind], *w)
		delete(l.open, kind)
	}
}

func (l *controlLog) lift(kind string, start, end time.Time, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.supersedeLocked(kind, start)
	w := l.open[kind]
	if w == nil {
		return // nothing set
	}
	if !ok {
		// It may have been lifted from start on, or may still be in
		// force: it is certain no longer, and possible from start on in
		// a window of its own (certain again after a set that answers).
		w.mayUntil, w.sureUntil = end.Add(controlBound), start
		l.wins[kind] = append(l.wins[kind], *w)
		l.open[kind] = &window{mayFrom: start}
		return
	}
	w.mayUntil, w.sureUntil = end.Add(controlBound), start
	l.wins[kind] = append(l.wins[kind], *w)
	delete(l.open, kind)
}

// supersedeLocked ends, at start, the certainty of the windows of kind
// already closed by an expiry: a request from start on replaces the
// control (a set without expiry, or a lift, ends the earlier expiry's
// hold on it), so the control is no longer certainly in force until that
// expiry, only possibly.
func (l *controlLog) supersedeLocked(kind string, start time.Time) {
	ws := l.wins[kind]
	for i := range ws {
		if ws[i].sureUntil.After(start) {
			ws[i].sureUntil = start
		}
	}
}

// close ends the windows left open at the end.
func (l *controlLog) close(at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for kind, w := range l.open {
		w.mayUntil, w.sureUntil = at.Add(controlBound), at
		l.wins[kind] = append(l.wins[kind], *w)
	}
	l.open = nil
}

func (l *controlLog) windows(kind string) []window {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]window(nil), l.wins[kind]...)
}

// controlLoop changes the controls every `every` until ctx is done, then
// lifts them (so the settle phase runs free).
func controlLoop(ctx context.Context, hs []*holdfast, every time.Duration, rng *rand.Rand, log *faultLog, cl *controlLog) {
	t := time.NewTicker(every)
	defer t.Stop()
	for tickCtx(ctx, t.C) {
		switch rng.IntN(4) {
		case 0:
			var expires time.Duration
			q := "/api/tags/" + tagDrained + "/drain?reason=chaos&by=chaos"
			if rng.IntN(3) == 0 {
				// Longer than controlBound, so that it is certainly in
				// force for a while before it lifts itself.
				expires = controlBound + time.Duration(1+rng.IntN(3))*time.Second
				q += "&for=" + expires.String()
			}
			start := time.Now()
			ok := adminCall(ctx, hs, rng, http.MethodPost, q)
			cl.set("drain", start, time.Now(), ok, expires)
			log.add(ok)
		case 1:
			start := time.Now()
			ok := adminCall(ctx, hs, rng, http.MethodDelete, "/api/tags/"+tagDrained+"/drain")
			cl.lift("drain", start, time.Now(), ok)
			log.add(ok)
		case 2:
			start := time.Now()
			ok := adminCall(ctx, hs, rng, http.MethodPut, fmt.Sprintf("/api/tags/%s/limit?max=%d&by=chaos", tagCapped, 1+rng.IntN(4)))
			cl.set("limit", start, time.Now(), ok, 0)
			log.add(ok)
		case 3:
			start := time.Now()
			ok := adminCall(ctx, hs, rng, http.MethodDelete, "/api/tags/"+tagCapped+"/limit")
			cl.lift("limit", start, time.Now(), ok)
			log.add(ok)
		}
	}
	// Lift both, retrying through any live instance.
	for _, c := range []struct{ kind, path string }{{"drain", "/api/tags/" + tagDrained + "/drain"}, {"limit", "/api/tags/" + tagCapped + "/limit"}} {
		for i := 0; i < 50; i++ {
			start := time.Now()
			if adminCall(context.Background(), hs, rng, http.MethodDelete, c.path) {
				cl.lift(c.kind, start, time.Now(), true)
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	cl.close(time.Now())
}

// adminCall sends one admin request to a random live instance and reports
// whether it answered 200.
func adminCall(ctx context.Context, hs []*holdfast, rng *rand.Rand, method, path string) bool {
	var live []*holdfast
	for _, h := range hs {
		if h.Alive() {
			live = append(live, h)
		}
	}
	if len(live) == 0 {
		return false
	}
	h := live[rng.IntN(len(live))]
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, "http://"+h.cfg.Admin+path, nil)
	if err != nil {
		return false
	}
	req.Header.Set("Authorization", "Bearer "+holdfastproc.AdminToken) // every change needs a write credential
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// killHoldfastRotating kills instance i mod len(hs) with SIGKILL every
// `every`, i counting up, and restarts it after down each time.
func killHoldfastRotating(ctx context.Context, hs []*holdfast, every, down time.Duration, log *faultLog) {
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-time.After(every):
		}
		h := hs[i%len(hs)]
		h.kill9()
		time.Sleep(down)
		if err := h.start(context.Background()); err != nil {
			log.fail("fault", "holdfast %d did not restart: %v", h.n, err)
			return
		}
		log.add(true)
	}
}

// checkControls judges the refusals in calls against what the controller
// did.
func checkControls(calls []Call, cl *controlLog) []Violation {
	drains, limits := cl.windows("drain"), cl.windows("limit")
	may := func(ws []window, c *Call) bool {
		for _, w := range ws {
			if !c.End.Before(w.mayFrom) && !c.Start.After(w.mayUntil) {
				return true
			}
		}
		return false
	}
	sure := func(ws []window, c *Call) bool {
		for _, w := range ws {
			if !w.sureFrom.IsZero() && !c.Start.Before(w.sureFrom) && !c.End.After(w.sureUntil) {
				return true
			}
		}
		return false
	}
	var out []Violation
	for i := range calls {
		c := &calls[i]
		switch {
		case c.Kind == Failed && c.Code == codeTagDrained && (c.Tag != tagDrained || !may(drains, c)):
			out = append(out, Violation{checkCodes, "refused as drained with no drain of its tag in force: " + c.String()})
		case c.Kind == Failed && c.Code == codeTagLimit && (c.Tag != tagCapped || !may(limits, c)):
			out = append(out, Violation{checkCodes, "refused under a cap with no cap of its tag in force: " + c.String()})
		case c.Kind == Answered && c.Tag == tagDrained && sure(drains, c):
			out = append(out, Violation{checkAnswers, "served while its tag was drained on every instance: " + c.String()})
		}
	}
	return append(out, checkShares(calls, limits)...)
}

// checkShares is the check that a fleet-wide cap is shared: while a cap
// was certainly in force everywhere, no instance whose clients kept
// calling the capped tag went longer than starveBound without one of
// those calls answered, while it was up (its calls refused by the cap,
// 9002, and none lost with it) and other instances' calls of the tag were
// answered. (Before the fleet shared its caps, the instance that first
// took a cap's grant kept it, and the others' clients got only 9002.)
const checkShared = "caps shared"

// starveBound is how long an instance may wait for its part of a cap: the
// convergence bound (three fleet polls, 1 s each, and a call's hold), two
// rounds of turns of 2 s (a cap smaller than the instances wanting it
// goes round them, and an instance may be left out of two rounds in a
// row), and a round more for the hand-over and a call's own time.
const starveBound = 3*time.Second + 3*2*time.Second + time.Second

// restartSettle is how long after an instance lost calls (killed, or its
// connections cut) its part of a cap may take: the grant of its killed
// incarnation lapses only after fleet.ttl (5 s), then the bound.
const restartSettle = 5*time.Second + starveBound

func checkShares(calls []Call, limits []window) []Violation {
	type event struct {
		at       time.Time
		instance int
	}
	var answered []event         // capped calls answered, by end
	refused := map[int][]event{} // capped calls refused by the cap, by instance
	lost := map[int][]event{}    // calls on the instance that died with it
	ends := map[int][]time.Time{}
	for i := range calls {
		c := &calls[i]
		switch {
		case c.Kind == Unknown || c.Kind == NotSent:
			lost[c.Instance] = append(lost[c.Instance], event{c.End, c.Instance})
		case c.Tag != tagCapped:
		case c.Kind == Answered:
			answered = append(answered, event{c.End, c.Instance})
			ends[c.Instance] = append(ends[c.Instance], c.End)
		case c.Kind == Failed && c.Code == codeTagLimit:
			refused[c.Instance] = append(refused[c.Instance], event{c.End, c.Instance})
		}
	}
	some := func(es []event, from, until time.Time, ok func(event) bool) bool {
		for _, e := range es {
			if e.at.After(from) && e.at.Before(until) && ok(e) {
				return true
			}
		}
		return false
	}
	always := func(event) bool { return true }
	var out []Violation
	for _, w := range limits {
		if w.sureFrom.IsZero() || w.sureUntil.Sub(w.sureFrom) <= starveBound {
			continue
		}
		for inst, rs := range refused {
			fences := []time.Time{w.sureFrom}
			for _, e := range ends[inst] {
				if e.After(w.sureFrom) && e.Before(w.sureUntil) {
					fences = append(fences, e)
				}
			}
			fences = append(fences, w.sureUntil)
			slices.SortFunc(fences, time.Time.Compare)
			for j := 1; j < len(fences); j++ {
				from, until := fences[j-1], fences[j]
				if until.Sub(from) <= starveBound ||
					!some(rs, from.Add(starveBound), until, always) || // no demand refused late in the gap
					some(lost[inst], from.Add(-restartSettle), until, always) || // it was down, or restarting
					!some(answered, from, until, func(e event) bool { return e.instance != inst }) {
					continue
				}
				out = append(out, Violation{checkShared, fmt.Sprintf(
					"instance %d: no call of the capped tag answered for %s (%s..%s), its calls refused by the cap, while other instances' were answered",
					inst, until.Sub(from).Round(time.Millisecond), from.Format("15:04:05.000"), until.Format("15:04:05.000"))})
				break // once per instance and window
			}
		}
	}
	return out
}

// controlSummary is the report's line on the controller's windows.
func controlSummary(cl *controlLog) string {
	var parts []string
	for _, kind := range []string{"drain", "limit"} {
		ws := cl.windows(kind)
		var sum time.Duration
		for _, w := range ws {
			if !w.sureFrom.IsZero() && w.sureUntil.After(w.sureFrom) {
				sum += w.sureUntil.Sub(w.sureFrom)
			}
		}
		parts = append(parts, fmt.Sprintf("%d %s windows (%s certainly in force everywhere)", len(ws), kind, sum.Round(time.Second)))
	}
	sort.Strings(parts)
	return fmt.Sprint(parts)
}
