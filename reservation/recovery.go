package reservation

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/holdfast-db/holdfast/internal/lifecycle"
)

// Answers under faults.
//
// A MySQL client takes a server error to mean "nothing happened" and a lost
// connection to mean "unknown". The engine keeps that contract for its own
// callers when its backend connection fails under a call: it never answers
// a lost connection with an error that looks like the database's answer.
//
// Every procedure that changes something is idempotent for its caller:
// reserve by (shop_id, idempotency_key), claim, release and extend by token.
// And each records, with its change and in the same transaction, the id of
// the call that made it: the reservation_id for a reserve (one per call,
// kept across its attempts), reservations.claimed_by, released_by and
// extended_by for the others (schema version 3). So a call whose backend
// connection was lost is finished on a fresh connection by running it
// again: the transaction, under its row locks (which wait for a
// transaction of the lost connection still in flight), finds what this
// call already did and answers that, or does it now. A reserve whose
// COMMIT's answer was lost first looks its key up with a locking read; a
// read, or a transaction lost before its COMMIT was sent, is run again.
// So a committed reserve answers its reservation (replayed 0), a committed
// claim answers "claimed" (not "duplicate"), a release "released", an
// extend the expiry it set, exactly as without the fault; coalesced
// reserves are settled key by key.
//
// receive, set_on_hand and adjust are not idempotent (a receive run twice
// receives twice): one lost before its COMMIT is run again; one lost during
// its COMMIT answers 9108 at once, saying that the change may or may not
// have been made and that the stock should be read before repeating it.
//
// All of it within the call's one deadline, Config.CallTimeout. When it
// passes, a call whose COMMIT's answer was lost and not found since
// answers 9108 (outcome unknown, repeating the same CALL is safe); a call
// that did nothing answers 2003 (UnavailableError: the database could not
// be reached) or 9107 (busy: contention); see callRun.answer.

// callRun follows one CALL through its attempts. Not safe for concurrent
// use: it belongs to the goroutine running the call.
type callRun struct {
	e    *Engine
	proc int    // index in procNames
	id   uint64 // the call's id, recorded with the change it makes
	// idempotent: running the call again after an unknown COMMIT is safe.
	idempotent bool
	// unsure: a COMMIT of this call was sent and its answer lost, and no
	// look at the database since has told whether it happened.
	unsure bool
	last   error // the failure of the last attempt it went on from
	tries  int
	// held: the call met a switchover and its deadline moved out to the
	// hold (hold.go).
	held bool
}

// heldPause bounds the pause between the attempts of a held call.
const heldPause = 100 * time.Millisecond

func (e *Engine) newCall(proc int) *callRun {
	switch proc {
	case procOp(opReceive), procOp(opSetOnHand), procOp(opAdjust):
		return &callRun{e: e, proc: proc, id: newID()}
	}
	return &callRun{e: e, proc: proc, id: newID(), idempotent: true}
}

func (c *callRun) name() string { return procNames[c.proc] }

// again decides, after a step of the call failed with err, whether the
// call goes on: it does (after a short jittered pause, and counted as a
// recovery) when the step lost its backend connection, or could not
// borrow one while the outcome is unknown, and the deadline has not
// passed. own says the step was the call's own transaction, whose lost
// COMMIT leaves the call unsure. Any other error is the call's answer
// (see answer).
func (c *callRun) again(ctx context.Context, err error, own bool) bool {
	lost := connLost(err)
	if lost && own && commitUnknown(err) {
		c.unsure = true
		if !c.idempotent {
			return false
		}
	}
	// A switchover (hold.go): the step did nothing (a read-only refusal,
	// a held borrow failure) or lost its connection. The call is held.
	switched := lost || readOnlyRefusal(err) || c.e.holdBorrow(err)
	if !switched && !(c.unsure && isBorrowError(err)) {
		return false
	}
	if switched && c.e.hold > 0 && holdCall(ctx) && !c.held {
		c.held = true
		c.e.m.held.inc(c.proc)
	}
	if ctx.Err() != nil {
		return false
	}
	c.last = err
	pause := jitter(c.e.cfg.BackoffMin, c.e.cfg.BackoffMax, c.tries)
	if c.held && !lost {
		// Nothing to recover: wait for the new primary without
		// hammering the old one.
		pause = jitter(c.e.cfg.BackoffMin, max(c.e.cfg.BackoffMax, heldPause), c.tries)
	}
	if lifecycle.Sleep(ctx, pause) != nil {
		return false
	}
	c.tries++
	if lost {
		c.e.m.recoveries.inc(c.proc)
	}
	return true
}

// answer turns the error that ends the call into what the caller is told:
//
//   - an *Error (a business answer, decided on a live connection) as it is;
//   - when a COMMIT's answer was lost and never found, 9108;
//   - when the call's context was cancelled: 1317 when with a cause (the
//     caller's KILL QUERY, KILL or disconnect), else 1053 (holdfast
//     shutting down);
//   - when no connection could be borrowed, UnavailableError carrying the
//     Borrow error;
//   - when the deadline passed: UnavailableError if the database kept
//     failing, else 9107 busy (contention, or a slow database);
//   - a lost connection the call could not go on from, UnavailableError;
//   - anything else (the database refused a statement, or an engine bug)
//     as it is: nothing was committed.
func (c *callRun) answer(ctx context.Context, err error) error {
	var biz *Error
	switch {
	case err == nil:
		return nil
	case errors.As(err, &biz):
		return err
	case c.unsure:
		return c.outcomeUnknown(err)
	case errors.Is(err, context.Canceled) || errors.Is(ctx.Err(), context.Canceled):
		if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
			// The caller's context ended with a cause of its own: the
			// statement was killed, or its client hung up.
			return &Error{Code: CodeInterrupted, State: "70100", Msg: "holdfast." + c.name() + ": interrupted (" + cause.Error() + "); nothing was done", err: err}
		}
		return &Error{Code: CodeShutdown, State: "08S01", Msg: "holdfast." + c.name() + ": holdfast is shutting down; nothing was done", err: err}
	case isBorrowError(err) && !errors.Is(err, context.DeadlineExceeded):
		return &UnavailableError{Proc: c.name(), Err: err, borrow: true, held: c.held}
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(ctx.Err(), context.DeadlineExceeded):
		if c.last != nil {
			return &UnavailableError{Proc: c.name(), Err: c.last, held: c.held, borrow: isBorrowError(c.last) && c.held}
		}
		return &Error{Code: CodeBusy, State: "HY000", err: err,
			Msg: "holdfast." + c.name() + ": could not finish within call_timeout (" + c.e.cfg.CallTimeout.String() +
				") because of lock contention or a slow database; nothing was done, retry"}
	case connLost(err):
		return &UnavailableError{Proc: c.name(), Err: err, held: c.held}
	case readOnlyRefusal(err):
		// Never a former primary's 1290: nothing was done.
		return &UnavailableError{Proc: c.name(), Err: err, held: c.held}
	}
	return err
}

// limit names the call's deadline for a message: call_timeout, or the
// hold for a held call.
func (c *callRun) limit() string {
	if c.held {
		return "the hold through a switchover of the primary (" + max(c.e.hold, c.e.cfg.CallTimeout).String() + ")"
	}
	return "call_timeout (" + c.e.cfg.CallTimeout.String() + ")"
}

func (c *callRun) outcomeUnknown(cause error) *Error {
	msg := "holdfast." + c.name() + ": outcome unknown: the connection to the database was lost while the call committed"
	if c.idempotent {
		msg += ", and no connection to the database could be had again within " + c.limit() +
			"; the call may or may not have taken effect. Repeating the same CALL is safe: it answers what was done, or does it"
	} else {
		msg += "; the change may or may not have been made. holdfast." + c.name() +
			" is not idempotent: read the stock (holdfast.availability) before repeating it"
	}
	return &Error{Code: CodeOutcomeUnknown, State: "08S01", Msg: msg, err: cause}
}

// errDoneByThisCall makes a re-run transaction roll back when it finds the
// change already made by this very call, on the connection that was lost:
// the call answers what that attempt did.
var errDoneByThisCall = errors.New("reservation: already done by this call before its connection was lost")

// callIDCol decodes a claimed_by / released_by / extended_by column; NULL
// is 0, which no call has.
func callIDCol(b []byte) uint64 {
	if b == nil {
		return 0
	}
	v, err := strconv.ParseUint(string(b), 10, 64)
	if err != nil {
		return 0
	}
	return v
}
