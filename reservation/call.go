package reservation

import (
	"context"
	"math"
	"strconv"
	"strings"
	"time"
)

// procedure describes one CALL holdfast.<name>.
type procedure struct {
	params []string
	run    func(e *Engine, ctx context.Context, args []any, o *CallOptions) ([]string, [][]any, error)
}

var procedures map[string]procedure

func init() {
	procedures = map[string]procedure{
		"reserve":      {[]string{"shop_id", "idempotency_key", "lines_json", "ttl_seconds"}, (*Engine).callReserve},
		"claim":        {[]string{"token"}, (*Engine).callClaim},
		"release":      {[]string{"token"}, (*Engine).callRelease},
		"extend":       {[]string{"token", "ttl_seconds"}, (*Engine).callExtend},
		"receive":      {[]string{"shop_id", "inventory_item_id", "inventory_group_id", "quantity"}, (*Engine).callReceive},
		"set_on_hand":  {[]string{"shop_id", "inventory_item_id", "inventory_group_id", "on_hand"}, (*Engine).callSetOnHand},
		"adjust":       {[]string{"shop_id", "inventory_item_id", "inventory_group_id", "delta"}, (*Engine).callAdjust},
		"availability": {[]string{"shop_id", "inventory_item_id"}, (*Engine).callAvailability},
	}
}

// Procedures lists the names Call answers and their parameter names, for
// documentation and for the proxy's routing tests.
func Procedures() map[string][]string {
	out := make(map[string][]string, len(procedures))
	for name, p := range procedures {
		out[name] = append([]string(nil), p.params...)
	}
	return out
}

// Call runs holdfast.<name>. args are the CALL's literal arguments already decoded by the proxy:
// each is nil (SQL NULL), int64, uint64, float64, or string ([]byte is accepted as a string).
// It returns the result set to send (column names and rows; row values are nil, int64, uint64,
// float64, string, []byte or time.Time) or an error.
//
// The call has one deadline, Config.CallTimeout (or ctx's, if earlier), shared by everything it
// does, recovery from lost backend connections included (see recovery.go); a call that meets a
// switchover of the primary is held, its deadline moved out to Options.Hold (see hold.go). Errors meant for the
// client implement MySQLError() (code, sqlState, message): *Error, and *UnavailableError for a
// call that did nothing because the database could not be reached (its BorrowErr, when set, is
// the Conns.Borrow error, which a caller that knows its Conns may answer with its own code). A
// lost backend connection never comes back as anything else; any other error is the database
// refusing a statement of the engine, or a bug, and nothing was committed.
//
// name is the lower-cased procedure name without the schema. Call is safe for concurrent use.
func (e *Engine) Call(ctx context.Context, name string, args []any) (columns []string, rows [][]any, err error) {
	return e.CallWith(ctx, name, args, CallOptions{})
}

// CallWith is Call with options, for a caller that keeps another store
// beside the engine (package reservation/legacy): see CallOptions. With the
// zero CallOptions it is Call.
func (e *Engine) CallWith(ctx context.Context, name string, args []any, o CallOptions) (columns []string, rows [][]any, err error) {
	p, ok := procedures[name]
	if !ok {
		return nil, nil, newError(CodeNoProcedure, "42000", "PROCEDURE holdfast.%s does not exist", name)
	}
	if len(args) != len(p.params) {
		return nil, nil, newError(CodeWrongArgCount, "42000",
			"Incorrect number of arguments for PROCEDURE holdfast.%s; expected %d, got %d", name, len(p.params), len(args))
	}
	if e.loops.Closed() {
		return nil, nil, ErrClosed
	}
	cctx, cancel := newCallCtx(ctx, e.cfg.CallTimeout, e.hold, e.switching)
	defer cancel()
	return p.run(e, cctx, args, &o)
}

// Argument decoding. Integers may arrive as int64, uint64, an integral
// float64 or a string holding an integer (a prepared-statement parameter
// sent as a string).

type intRule int

const (
	positive    intRule = iota // >= 1
	nonNegative                // >= 0
	anyInt
)

func (r intRule) String() string {
	switch r {
	case positive:
		return "a positive integer"
	case nonNegative:
		return "a non-negative integer"
	default:
		return "an integer"
	}
}

func intArg(proc string, args []any, i int, name string, rule intRule) (int64, error) {
	v, ok := toInt(args[i])
	if !ok || (rule == positive && v < 1) || (rule == nonNegative && v < 0) {
		return 0, badArg(proc, i+1, name, "must be %s, got %s", rule, describe(args[i]))
	}
	return v, nil
}

func toInt(a any) (int64, bool) {
	switch v := a.(type) {
	case int64:
		return v, true
	case int:
		return int64(v), true
	case uint64:
		if v > math.MaxInt64 {
			return 0, false
		}
		return int64(v), true
	case float64:
		if v != math.Trunc(v) || v < -9e15 || v > 9e15 {
			return 0, false
		}
		return int64(v), true
	case string:
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		return n, err == nil
	case []byte:
		n, err := strconv.ParseInt(strings.TrimSpace(string(v)), 10, 64)
		return n, err == nil
	}
	return 0, false
}

func stringArg(proc string, args []any, i int, name string, maxLen int) (string, error) {
	var s string
	switch v := args[i].(type) {
	case string:
		s = v
	case []byte:
		s = string(v)
	case int64, uint64:
		s = describe(v)
	default:
		return "", badArg(proc, i+1, name, "must be a string, got %s", describe(args[i]))
	}
	if s == "" {
		return "", badArg(proc, i+1, name, "must not be empty")
	}
	if len(s) > maxLen {
		return "", badArg(proc, i+1, name, "is %d bytes; at most %d are allowed", len(s), maxLen)
	}
	return s, nil
}

// describe renders a CALL argument for an error message.
func describe(a any) string {
	switch v := a.(type) {
	case nil:
		return "NULL"
	case string:
		return quoteShort(v)
	case []byte:
		return quoteShort(string(v))
	case int64:
		return strconv.FormatInt(v, 10)
	case int:
		return strconv.Itoa(v)
	case uint64:
		return strconv.FormatUint(v, 10)
	case float64:
		return strconv.FormatFloat(v, 'g', -1, 64)
	default:
		return "a value of unsupported type"
	}
}

func quoteShort(s string) string {
	const max = 40
	if len(s) > max {
		s = s[:max] + "..."
	}
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}

// ttlArg decodes a ttl_seconds argument; NULL means the configured default.
func (e *Engine) ttlArg(proc string, args []any, i int) (time.Duration, error) {
	if args[i] == nil {
		return e.cfg.DefaultTTL, nil
	}
	v, ok := toInt(args[i])
	if !ok || v < 1 {
		return 0, badArg(proc, i+1, "ttl_seconds", "must be a positive integer, got %s", describe(args[i]))
	}
	if v > int64(e.cfg.MaxTTL/time.Second) {
		return 0, badArg(proc, i+1, "ttl_seconds", "is %d; at most %d (max_ttl) is allowed", v, int64(e.cfg.MaxTTL/time.Second))
	}
	ttl := time.Duration(v) * time.Second
	if ttl <= e.cfg.MinTTL() {
		return 0, badArg(proc, i+1, "ttl_seconds", "is %d; it must exceed payment timeout + callback retry window + clock skew = %d seconds",
			v, int64(e.cfg.MinTTL()/time.Second))
	}
	return ttl, nil
}
