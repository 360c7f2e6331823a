package legacy

import (
	"errors"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/holdfast-db/holdfast/reservation"
)

// Comparing the two sides.
//
// Every call that both sides answer is counted by the pair of answers'
// classes, holdfast_shadow_comparisons_total{procedure, redis, holdfast}.
// The classes are few and fixed, so the label set is bounded:
//
//	reserve  ok, insufficient, conflict
//	claim    ok (held), late (expired or released, deducted anyway),
//	         duplicate, unknown_token, resynced
//	release  released, expired, duplicate, claimed, unknown_token, resynced
//	extend   ok, expired, claimed, released, unknown_token, resynced
//
// and on either side error (the side failed), and on the engine's
// busy (9107: contention; its own class, not an answer about stock),
// unavailable, outcome_unknown, refused (9106), bad_argument. Two business
// answers that differ are a disagreement: logged, at most once a second
// (with the count of those not logged), with the shop, item, location,
// token and both answers.

// engineClass classes an engine error (nil: ok).
func engineClass(err error) string {
	if err == nil {
		return "ok"
	}
	var ue *reservation.UnavailableError
	if errors.As(err, &ue) {
		return "unavailable"
	}
	var e *reservation.Error
	if errors.As(err, &e) {
		switch e.Code {
		case reservation.CodeInsufficientStock:
			return "insufficient"
		case reservation.CodeIdempotencyConflict:
			return "conflict"
		case reservation.CodeUnknownToken:
			return "unknown_token"
		case reservation.CodeExpired:
			return "expired"
		case reservation.CodeBadArgument:
			return "bad_argument"
		case reservation.CodeGuardViolated:
			return "refused"
		case reservation.CodeBusy:
			return "busy"
		case reservation.CodeOutcomeUnknown:
			return "outcome_unknown"
		}
	}
	return "error"
}

// business reports whether a class is an answer about stock or state (as
// opposed to a failure of the side that gave it).
func business(class string) bool {
	switch class {
	case "error", "busy", "unavailable", "outcome_unknown", "bad_argument":
		return false
	}
	return true
}

type cmpKey struct{ proc, redis, holdfast string }

// comparisons counts pairs of answers and logs disagreements.
type comparisons struct {
	log *slog.Logger
	now func() time.Time

	mu         sync.Mutex // guards following
	counts     map[cmpKey]uint64
	lastLog    time.Time
	suppressed int
}

func (c *comparisons) add(proc, redis, holdfast string, attrs ...any) {
	c.mu.Lock()
	if c.counts == nil {
		c.counts = map[cmpKey]uint64{}
	}
	c.counts[cmpKey{proc, redis, holdfast}]++
	disagree := redis != holdfast && business(redis) && business(holdfast)
	logNow := false
	suppressed := 0
	if disagree {
		if now := c.now(); now.Sub(c.lastLog) >= time.Second {
			c.lastLog, logNow, suppressed, c.suppressed = now, true, c.suppressed, 0
		} else {
			c.suppressed++
		}
	}
	c.mu.Unlock()
	if logNow {
		c.log.Warn("legacy: redis and holdfast disagree", append([]any{"procedure", proc, "redis", redis, "holdfast", holdfast,
			"not_logged_since_last", suppressed}, attrs...)...)
	}
}

// Comparison is one pair of answers and how often it was seen.
type Comparison struct {
	Procedure, Redis, Holdfast string
	Count                      uint64
}

func (c *comparisons) snapshot() []Comparison {
	c.mu.Lock()
	out := make([]Comparison, 0, len(c.counts))
	for k, n := range c.counts {
		out = append(out, Comparison{k.proc, k.redis, k.holdfast, n})
	}
	c.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		return strings.Join([]string{a.Procedure, a.Redis, a.Holdfast}, "\x00") < strings.Join([]string{b.Procedure, b.Redis, b.Holdfast}, "\x00")
	})
	return out
}

// rateLog logs one line a second at most, counting the rest.
type rateLog struct {
	mu         sync.Mutex // guards following
	last       time.Time
	suppressed int
}

func (r *rateLog) due(now time.Time) (bool, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if now.Sub(r.last) < time.Second {
		r.suppressed++
		return false, 0
	}
	n := r.suppressed
	r.last, r.suppressed = now, 0
	return true, n
}
