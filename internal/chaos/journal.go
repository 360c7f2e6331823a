package chaos

import (
	"bufio"
	"database/sql/driver"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"time"

	"github.com/go-sql-driver/mysql"
)

// Procedures the clients call.
const (
	procReserve = "reserve"
	procClaim   = "claim"
	procRelease = "release"
)

// Kind is how a call ended, as its client saw it.
type Kind int

const (
	// Answered: a result set came back.
	Answered Kind = iota
	// Failed: a MySQL error came back (other than 9108). By the MySQL
	// convention, nothing was done (9010: nothing ran, or the transaction
	// was rolled back).
	Failed
	// Unknown: the client cannot know whether the call took effect: its
	// connection died after the call was sent, or the answer was 9108.
	Unknown
	// NotSent: the call never reached holdfast: no connection could be
	// made, or the driver found the connection dead before writing.
	NotSent
)

func (k Kind) String() string {
	return [...]string{"answered", "failed", "unknown", "not sent"}[k]
}

// MarshalText writes the kind's name in the journal file.
func (k Kind) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

// writeJournal writes calls, in the order they began, to path as JSON
// lines: the journal the judge read, kept with the work directory.
func writeJournal(path string, calls []Call) error {
	sorted := slices.Clone(calls)
	slices.SortStableFunc(sorted, func(a, b Call) int { return a.Start.Compare(b.Start) })
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("chaos: %w", err)
	}
	w := bufio.NewWriter(f)
	enc := json.NewEncoder(w)
	for i := range sorted {
		if err := enc.Encode(&sorted[i]); err != nil {
			f.Close()
			return fmt.Errorf("chaos: write journal: %w", err)
		}
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return fmt.Errorf("chaos: write journal: %w", err)
	}
	return f.Close()
}

// Line is one line of a reservation: an item and quantity, and the
// location a reserve chose for it (Group; 0 in a request).
type Line struct {
	Item, Group, Qty int64
}

// PoolKey is one item/location of the harness's shop.
type PoolKey struct{ Item, Group int64 }

func (k PoolKey) String() string { return fmt.Sprintf("item %d at location %d", k.Item, k.Group) }

// Call is one CALL holdfast.* as the journal keeps it: what was asked,
// and what the client was told.
type Call struct {
	Client   int
	Instance int    // the holdfast instance the client was connected to
	Tag      string // the call's conn_tag ("" none)
	Proc     string
	Key      string // reserve: the idempotency key
	Token    string // claim, release: the argument; reserve: the answer's
	Request  []Line // reserve: the lines asked for (Group 0)
	// Locations is every request line's candidate locations.
	Locations  [][]int64
	Start, End time.Time

	Kind Kind
	Code uint16 // Failed, or Unknown by 9108
	Msg  string // error text
	// Dropped: the client's connection died under this call (Unknown or
	// NotSent by a dead connection, not by a refused dial).
	Dropped bool
	// Hung: no answer within the answer timeout.
	Hung bool

	// Answered calls.
	Replayed bool   // reserve
	Outcome  string // claim (claimed, duplicate, late, forced), release
	Qty      int64  // release: units given back
	Lines    []Line // reserve, claim: the answer's lines
}

func (c *Call) String() string {
	var what string
	switch c.Proc {
	case procReserve:
		what = fmt.Sprintf("reserve(key %s, %v)", c.Key, c.Request)
	default:
		what = fmt.Sprintf("%s(%s)", c.Proc, c.Token)
	}
	var ans string
	switch c.Kind {
	case Answered:
		switch c.Proc {
		case procReserve:
			ans = fmt.Sprintf("token %s replayed=%v lines %v", c.Token, c.Replayed, c.Lines)
		case procClaim:
			ans = fmt.Sprintf("%s lines %v", c.Outcome, c.Lines)
		default:
			ans = fmt.Sprintf("%s quantity %d", c.Outcome, c.Qty)
		}
	case Failed, Unknown:
		if c.Code != 0 {
			ans = fmt.Sprintf("error %d: %s", c.Code, c.Msg)
		} else {
			ans = "connection lost: " + c.Msg
		}
	case NotSent:
		ans = "not sent: " + c.Msg
	}
	return fmt.Sprintf("client %d via holdfast %d at %s (%v): %s -> %s",
		c.Client, c.Instance, c.Start.Format("15:04:05.000"), c.End.Sub(c.Start).Round(time.Millisecond), what, ans)
}

// answerLabel is the call's answer as the report counts it: the outcome
// of an answered claim or release, "ok" of a reserve, the error code, or
// the kind of a lost call.
func (c *Call) answerLabel() string {
	switch c.Kind {
	case Answered:
		if c.Proc == procReserve {
			if c.Replayed {
				return "ok (replay)"
			}
			return "ok"
		}
		return c.Outcome
	case Failed:
		return strconv.Itoa(int(c.Code))
	case Unknown:
		if c.Code != 0 {
			return strconv.Itoa(int(c.Code))
		}
		if c.Hung {
			return "no answer"
		}
		return "connection lost"
	}
	if c.Dropped {
		return "connection dead, not sent"
	}
	return "no connection"
}

// Codes of answers a client may meet under faults; each means nothing was
// done (9108 aside, which the journal keeps as Unknown).
const (
	codeInsufficient   = 9101
	codeExpired        = 9104
	codeGuard          = 9106
	codeBusy           = 9107
	codeOutcomeUnknown = 9108
	codeUnavailable    = 2003
	codePoolExhausted  = 1040
	codeShutdown       = 1053
	// codeSwitching (9010) is holdfast's "the primary is switching":
	// the statement or CALL ran nowhere, or its transaction was rolled
	// back; retry it. A true answer, judged as nothing done.
	codeSwitching = 9010
)

// expectedCodes lists, per procedure, the errors a true answer may carry
// in this workload. Others (1105 above all; 9102, 9103, 9105, which the
// harness never provokes; 9003, 9004, 1317, ...) are violations.
// 1290 (a read-only server refused the write) is one of them: holdfast
// must never pass on a former primary's refusal.
var expectedCodes = map[string][]uint16{
	procReserve: {codeInsufficient, codeBusy, codeUnavailable, codePoolExhausted, codeShutdown, codeSwitching},
	procClaim:   {codeExpired, codeGuard, codeBusy, codeUnavailable, codePoolExhausted, codeShutdown, codeSwitching},
	procRelease: {codeBusy, codeUnavailable, codePoolExhausted, codeShutdown, codeSwitching},
}

// expectedCode reports whether a failed call's code may be a true answer:
// expectedCodes, and with controls (the controls scenario) a refusal by a
// drain or a cap, which checkControls judges against what on-call did.
func expectedCode(c *Call, controls bool) bool {
	return slices.Contains(expectedCodes[c.Proc], c.Code) || controls && (c.Code == codeTagDrained || c.Code == codeTagLimit)
}

// retryable reports whether the client repeats the call after this answer:
// an unknown outcome (repeating is safe), or "nothing was done, retry".
func (c *Call) retryable() bool {
	switch c.Kind {
	case Unknown, NotSent:
		return true
	case Failed:
		switch c.Code {
		case codeBusy, codeUnavailable, codePoolExhausted, codeShutdown, codeTagDrained, codeTagLimit, codeSwitching:
			return true
		}
	}
	return false
}

// classify records err, the end of a call, in c. It reports whether the
// client's connection is still usable.
func (c *Call) classify(err error, answerTimeout time.Duration) (connOK bool) {
	var me *mysql.MySQLError
	switch {
	case err == nil:
		c.Kind = Answered
		return true
	case errors.As(err, &me):
		c.Kind, c.Code, c.Msg = Failed, me.Number, me.Message
		if me.Number == codeOutcomeUnknown {
			c.Kind = Unknown
		}
		return true
	case errors.Is(err, driver.ErrBadConn):
		// go-sql-driver says ErrBadConn only when nothing was written.
		c.Kind, c.Dropped, c.Msg = NotSent, true, err.Error()
		return false
	}
	c.Kind, c.Dropped, c.Msg = Unknown, true, err.Error()
	c.Hung = c.End.Sub(c.Start) >= answerTimeout-100*time.Millisecond
	return false
}
