package reservation

import (
	"context"
	"errors"
	"fmt"
)

// Error codes the engine reports to clients. Each is documented, with its
// SQLSTATE, in docs/reservation.md. 9101..9108 are in MySQL's range for
// user-defined errors (SIGNAL), so no server error can be mistaken for them.
const (
	CodeInsufficientStock   uint16 = 9101 // SQLSTATE 45000
	CodeIdempotencyConflict uint16 = 9102 // SQLSTATE 45000
	CodeUnknownToken        uint16 = 9103 // SQLSTATE 45000
	CodeExpired             uint16 = 9104 // SQLSTATE 45000
	CodeBadArgument         uint16 = 9105 // SQLSTATE 22023
	CodeGuardViolated       uint16 = 9106 // SQLSTATE 45000
	CodeBusy                uint16 = 9107 // SQLSTATE HY000: retryable, nothing was done
	CodeOutcomeUnknown      uint16 = 9108 // SQLSTATE 08S01: the database stayed unreachable; repeating the CALL is safe
	CodeUnavailable         uint16 = 2003 // SQLSTATE HY000, as the client's CR_CONN_HOST_ERROR: nothing was done
	CodeShutdown            uint16 = 1053 // SQLSTATE 08S01, as MySQL's ER_SERVER_SHUTDOWN
	CodeInterrupted         uint16 = 1317 // SQLSTATE 70100, as MySQL's ER_QUERY_INTERRUPTED: the caller's KILL QUERY, KILL or disconnect; nothing was done
	CodeNoProcedure         uint16 = 1305 // SQLSTATE 42000, as MySQL's ER_SP_DOES_NOT_EXIST
	CodeWrongArgCount       uint16 = 1318 // SQLSTATE 42000, as MySQL's ER_SP_WRONG_NO_OF_ARGS
)

// Sentinels for errors.Is. An *Error matches the sentinel with the same code.
var (
	ErrInsufficientStock   = &Error{Code: CodeInsufficientStock, State: "45000", Msg: "insufficient stock"}
	ErrIdempotencyConflict = &Error{Code: CodeIdempotencyConflict, State: "45000", Msg: "idempotency key reused with a different request"}
	ErrUnknownToken        = &Error{Code: CodeUnknownToken, State: "45000", Msg: "unknown reservation token"}
	ErrExpired             = &Error{Code: CodeExpired, State: "45000", Msg: "reservation expired"}
	ErrBadArgument         = &Error{Code: CodeBadArgument, State: "22023", Msg: "bad argument"}
	ErrGuardViolated       = &Error{Code: CodeGuardViolated, State: "45000", Msg: "on_hand guard violated"}
	ErrBusy                = &Error{Code: CodeBusy, State: "HY000", Msg: "pool busy, retry"}
	// ErrOutcomeUnknown matches the answer of a call whose backend
	// connection failed while it committed and that could not find out,
	// before its deadline, whether the commit happened.
	ErrOutcomeUnknown = &Error{Code: CodeOutcomeUnknown, State: "08S01", Msg: "outcome unknown"}
	// ErrClosed is returned by calls made after Close.
	ErrClosed = &Error{Code: CodeShutdown, State: "08S01", Msg: "holdfast is shutting down; the reservation engine is closed"}
)

// Error is a failure with a MySQL error code and SQLSTATE meant for the
// client. Msg is the client-facing text (it names the procedure, and the
// argument or line at fault); Error() adds the package prefix for logs.
type Error struct {
	Code  uint16
	State string
	Msg   string
	err   error // optional cause
}

func (e *Error) Error() string { return "reservation: " + e.Msg }

// Unwrap returns the cause, if any.
func (e *Error) Unwrap() error { return e.err }

// Is matches any *Error with the same code, so errors.Is(err,
// ErrInsufficientStock) works for every insufficient-stock error.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

// MySQLError is the method the proxy looks for to send a specific error
// code, SQLSTATE and message to the client.
func (e *Error) MySQLError() (code uint16, sqlState string, message string) {
	return e.Code, e.State, e.Msg
}

// UnavailableError is the answer of a call that did nothing because the
// database could not be reached: Conns.Borrow failed, or every connection
// it got failed before anything of the call could have committed, until its
// deadline. It reaches a client as 2003 (SQLSTATE HY000) unless the caller
// knows the Conns implementation better: BorrowErr is the Borrow error (nil
// when reads failed instead), e.g. the proxy's "pool exhausted" or "tag
// drained", which the proxy answers with its own codes.
type UnavailableError struct {
	Proc string // the procedure, e.g. "claim"
	Err  error  // the last failure
	// borrow is set when Err is a Borrow failure.
	borrow bool
	// held is set when the call was held through a switchover of the
	// primary (hold.go) and no writable primary answered within the hold.
	held bool
}

func (e *UnavailableError) Error() string {
	return "reservation: holdfast." + e.Proc + " did nothing: the database could not be reached: " + e.Err.Error()
}

// Unwrap returns the last failure.
func (e *UnavailableError) Unwrap() error { return e.Err }

// BorrowErr returns the Conns.Borrow error that kept the call from doing
// anything, or nil if the call failed otherwise.
func (e *UnavailableError) BorrowErr() error {
	if !e.borrow {
		return nil
	}
	return e.Err
}

// MySQLError implements the proxy's interface: 2003, nothing was done.
func (e *UnavailableError) MySQLError() (uint16, string, string) {
	if e.held {
		return CodeUnavailable, "HY000", "holdfast." + e.Proc + ": no writable primary answered within the hold through a switchover of the primary; nothing was done, retry"
	}
	return CodeUnavailable, "HY000", "holdfast." + e.Proc + ": the database could not be reached; nothing was done, retry"
}

func newError(code uint16, state, format string, a ...any) *Error {
	return &Error{Code: code, State: state, Msg: fmt.Sprintf(format, a...)}
}

func badArg(proc string, pos int, name, format string, a ...any) *Error {
	return newError(CodeBadArgument, "22023", "holdfast.%s: argument %d (%s) %s", proc, pos, name, fmt.Sprintf(format, a...))
}

// Interrupted turns the answer err of a call whose caller interrupted it
// (ctx ended with a cause of its own: a KILL QUERY, a KILL, the client
// hanging up) and that did nothing into 1317, interrupted, so that the
// caller is not told the database or the legacy counter failed. Answers
// that say something happened, or may have (9108), stay as they are.
func Interrupted(ctx context.Context, proc string, err error) error {
	if err == nil || ctx.Err() == nil {
		return err
	}
	cause := context.Cause(ctx)
	if cause == nil || errors.Is(cause, context.Canceled) || errors.Is(cause, context.DeadlineExceeded) {
		return err
	}
	var e *Error
	var u *UnavailableError
	switch {
	case errors.As(err, &e) && (e.Code == CodeUnavailable || e.Code == CodeBusy || e.Code == CodeShutdown),
		errors.As(err, &u):
		return &Error{Code: CodeInterrupted, State: "70100", Msg: "holdfast." + proc + ": interrupted (" + cause.Error() + "); nothing was done", err: err}
	}
	return err
}
