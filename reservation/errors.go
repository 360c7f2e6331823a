package reservation

import (
	"errors"
	"fmt"
)

// Error codes the engine reports to clients. Each is documented, with its
// SQLSTATE, in docs/reservation.md. 9101..9107 are in MySQL's range for
// user-defined errors (SIGNAL), so no server error can be mistaken for them.
const (
	CodeInsufficientStock   uint16 = 9101 // SQLSTATE 45000
	CodeIdempotencyConflict uint16 = 9102 // SQLSTATE 45000
	CodeUnknownToken        uint16 = 9103 // SQLSTATE 45000
	CodeExpired             uint16 = 9104 // SQLSTATE 45000
	CodeBadArgument         uint16 = 9105 // SQLSTATE 22023
	CodeGuardViolated       uint16 = 9106 // SQLSTATE 45000
	CodeBusy                uint16 = 9107 // SQLSTATE HY000: retryable, nothing was reserved
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
	// ErrClosed is returned by calls made after Close.
	ErrClosed = errors.New("reservation: engine closed")
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

func newError(code uint16, state, format string, a ...any) *Error {
	return &Error{Code: code, State: state, Msg: fmt.Sprintf(format, a...)}
}

func badArg(proc string, pos int, name, format string, a ...any) *Error {
	return newError(CodeBadArgument, "22023", "holdfast.%s: argument %d (%s) %s", proc, pos, name, fmt.Sprintf(format, a...))
}
