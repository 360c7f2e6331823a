package reservation

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"
)

// Conns lends backend connections. Every borrow is attributed to tag (e.g. "holdfast:reserve").
type Conns interface {
	Borrow(ctx context.Context, tag string) (Conn, error)
}

// Conn is one borrowed backend connection, used by one goroutine at a time.
//
// query may hold several statements separated by ';' (the connection has
// CLIENT_MULTI_STATEMENTS on), sent in one round trip: the server runs them
// in order and stops at the first error, which is returned. The engine uses
// this to cut round trips (SET TRANSACTION + START TRANSACTION + the first
// statement; the last statements + COMMIT); when it needs the rows of
// several result sets from one round trip, each SELECT tags its rows with a
// literal first column.
type Conn interface {
	// Exec runs the statement(s); args are interpolated by the implementation as SQL literals
	// (supported: nil, int, int64, uint64, float64, string, []byte, bool, time.Time).
	// With several statements the Result is the last one's.
	Exec(ctx context.Context, query string, args ...any) (Result, error)
	// Query runs the statement(s) and returns all rows of every result set, appended in
	// order; a NULL is a nil []byte.
	Query(ctx context.Context, query string, args ...any) ([][][]byte, error)
	// Release returns the connection. broken=true discards it (use after any I/O error, context
	// cancellation mid-statement, or when the session state is unknown, e.g. a transaction could not be rolled back).
	Release(broken bool)
}

// Result is what Exec reports.
type Result struct{ AffectedRows, LastInsertID uint64 }

// DBError is an error the database itself returned, with its MySQL error
// number. Conn implementations must return errors from the server as (or
// wrapping) a DBError so the engine can tell a deadlock (1213), a lock-wait
// timeout (1205) or a duplicate key (1062) from an I/O failure.
type DBError interface {
	error
	Number() uint16
}

// MySQL error numbers the engine acts on.
const (
	errNumDupKey   = 1062
	errNumLockWait = 1205
	errNumDeadlock = 1213
)

// Lost connections.
//
// An error from a Conn is either the database's answer to the statement (a
// DBError: the statement failed, and the engine rolls its transaction back)
// or a lost connection: any other error (I/O, a cancelled context), and the
// server errors below, which end the connection or interrupt a statement
// whose effect is then not known. After a lost connection the statement in
// flight may or may not have run; if it carried COMMIT the transaction may
// or may not have committed (see commitUnknownError). Every procedure
// finds out on a fresh connection (recovery.go).

// lostNumber reports whether server error n means a lost connection.
func lostNumber(n uint16) bool {
	switch n {
	case 1053, // ER_SERVER_SHUTDOWN
		1152,                   // ER_ABORTING_CONNECTION
		1158, 1159, 1160, 1161, // ER_NET_READ_ERROR .. ER_NET_WRITE_INTERRUPTED
		1317,       // ER_QUERY_INTERRUPTED: a KILL QUERY that hits a COMMIT leaves it unknown
		1927,       // ER_CONNECTION_KILLED (MariaDB)
		2006, 2013, // CR_SERVER_GONE_ERROR, CR_SERVER_LOST, should a Conn pass them on
		4031: // ER_CLIENT_INTERACTION_TIMEOUT (MySQL 8)
		return true
	}
	return false
}

// lostError wraps an error of Conn.Exec or Conn.Query that is not the
// database's answer (see markConns).
type lostError struct{ err error }

func (e *lostError) Error() string { return e.err.Error() }
func (e *lostError) Unwrap() error { return e.err }

// borrowError wraps a Conns.Borrow failure: nothing was sent.
type borrowError struct{ err error }

func (e *borrowError) Error() string { return e.err.Error() }
func (e *borrowError) Unwrap() error { return e.err }

// connLost reports whether err says a backend connection was lost in the
// middle of a statement.
func connLost(err error) bool {
	if err == nil {
		return false
	}
	if n, ok := dbErrorNumber(err); ok {
		return lostNumber(n)
	}
	var l *lostError
	return errors.As(err, &l)
}

// brokenBy reports whether a connection whose statement failed with err
// must be released broken: the connection was lost (for Conns the engine
// did not wrap too, any error that is not the database's answer).
func brokenBy(err error) bool {
	return err != nil && (!isDB(err) || connLost(err))
}

func isBorrowError(err error) bool {
	var b *borrowError
	return errors.As(err, &b)
}

// markConns is the engine's view of its Conns: Borrow failures come back
// as borrowError and statement errors that are not the database's answer
// as lostError, so the engine can tell them from its own errors.
type markConns struct{ Conns }

func (m markConns) Borrow(ctx context.Context, tag string) (Conn, error) {
	c, err := m.Conns.Borrow(ctx, tag)
	if err != nil {
		return nil, &borrowError{err}
	}
	return markConn{c}, nil
}

type markConn struct{ Conn }

func (m markConn) Exec(ctx context.Context, query string, args ...any) (Result, error) {
	r, err := m.Conn.Exec(ctx, query, args...)
	return r, markLost(err)
}

func (m markConn) Query(ctx context.Context, query string, args ...any) ([][][]byte, error) {
	rows, err := m.Conn.Query(ctx, query, args...)
	return rows, markLost(err)
}

func markLost(err error) error {
	if err == nil || isDB(err) {
		return err
	}
	return &lostError{err}
}

// Borrow tags. Every connection the engine or the refiller takes from the
// pool is borrowed under one of these, so its hold time is attributed.
const (
	TagReserve   = "holdfast:reserve"
	TagClaim     = "holdfast:claim"
	TagRelease   = "holdfast:release"
	TagExtend    = "holdfast:extend"
	TagStock     = "holdfast:stock"
	TagRead      = "holdfast:read"
	TagRefill    = "holdfast:refill"
	TagSweep     = "holdfast:sweep"
	TagReconcile = "holdfast:reconcile"
	TagMigrate   = "holdfast:migrate"
)

// dbErrorNumber reports the MySQL error number inside err, if any.
func dbErrorNumber(err error) (uint16, bool) {
	var d DBError
	if errors.As(err, &d) {
		return d.Number(), true
	}
	return 0, false
}

// IsDBError reports whether err came from the database with number n.
func IsDBError(err error, n uint16) bool {
	got, ok := dbErrorNumber(err)
	return ok && got == n
}

// Interpolate replaces each ? outside quotes and comments in query with the
// SQL literal of the next arg. It is what SQLConns does and what any other
// Conn implementation may use. Strings and byte slices that are not plain
// printable ASCII without quotes or backslashes are written as hex literals
// (X'..'), which read the same whatever the server's sql_mode
// (NO_BACKSLASH_ESCAPES included).
func Interpolate(query string, args ...any) (string, error) {
	if len(args) == 0 {
		return query, nil
	}
	buf := make([]byte, 0, len(query)+16*len(args))
	n := 0
	var quote byte
	for i := 0; i < len(query); i++ {
		c := query[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			}
			buf = append(buf, c)
		case c == '\'' || c == '"' || c == '`':
			quote = c
			buf = append(buf, c)
		case c == '?':
			if n >= len(args) {
				return "", fmt.Errorf("reservation: query has more placeholders than the %d args", len(args))
			}
			var err error
			if buf, err = AppendLiteral(buf, args[n]); err != nil {
				return "", fmt.Errorf("reservation: arg %d: %w", n+1, err)
			}
			n++
		default:
			buf = append(buf, c)
		}
	}
	if n != len(args) {
		return "", fmt.Errorf("reservation: query has %d placeholders for %d args", n, len(args))
	}
	return string(buf), nil
}

// AppendLiteral appends v as a SQL literal. Supported: nil, int, int64,
// uint64, float64, string, []byte, bool, time.Time (written in UTC with
// microseconds).
func AppendLiteral(buf []byte, v any) ([]byte, error) {
	switch v := v.(type) {
	case nil:
		return append(buf, "NULL"...), nil
	case int:
		return strconv.AppendInt(buf, int64(v), 10), nil
	case int64:
		return strconv.AppendInt(buf, v, 10), nil
	case uint64:
		return strconv.AppendUint(buf, v, 10), nil
	case float64:
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return buf, fmt.Errorf("float %v has no SQL literal", v)
		}
		return strconv.AppendFloat(buf, v, 'g', -1, 64), nil
	case bool:
		if v {
			return append(buf, '1'), nil
		}
		return append(buf, '0'), nil
	case string:
		return appendStringLiteral(buf, v), nil
	case []byte:
		if v == nil {
			return append(buf, "NULL"...), nil
		}
		return appendStringLiteral(buf, string(v)), nil
	case time.Time:
		buf = append(buf, '\'')
		buf = v.UTC().AppendFormat(buf, "2006-01-02 15:04:05.000000")
		return append(buf, '\''), nil
	default:
		return buf, fmt.Errorf("unsupported argument type %T", v)
	}
}

func appendStringLiteral(buf []byte, s string) []byte {
	plain := true
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '\'' || c == '\\' || c == '"' {
			plain = false
			break
		}
	}
	if plain {
		buf = append(buf, '\'')
		buf = append(buf, s...)
		return append(buf, '\'')
	}
	if s == "" {
		return append(buf, "''"...)
	}
	const hex = "0123456789ABCDEF"
	buf = append(buf, "X'"...)
	for i := 0; i < len(s); i++ {
		buf = append(buf, hex[s[i]>>4], hex[s[i]&0xf])
	}
	return append(buf, '\'')
}

// TextConn is a borrowed connection that runs statement text as it is
// (holdfast's proxy lends its pool's connections so): TextConns puts the
// arguments into the text.
type TextConn interface {
	Exec(ctx context.Context, sql string) (affected, insertID uint64, err error)
	Query(ctx context.Context, sql string) ([][][]byte, error)
	Release(broken bool)
}

// TextConns is Conns over a borrow function that lends TextConns: each
// query's arguments are interpolated as SQL literals (Interpolate).
func TextConns(borrow func(ctx context.Context, tag string) (TextConn, error)) Conns {
	return textConns(borrow)
}

type textConns func(ctx context.Context, tag string) (TextConn, error)

func (b textConns) Borrow(ctx context.Context, tag string) (Conn, error) {
	c, err := b(ctx, tag)
	if err != nil {
		return nil, err
	}
	return textConn{c}, nil
}

type textConn struct{ c TextConn }

func (t textConn) Exec(ctx context.Context, query string, args ...any) (Result, error) {
	q, err := Interpolate(query, args...)
	if err != nil {
		return Result{}, err
	}
	affected, id, err := t.c.Exec(ctx, q)
	return Result{AffectedRows: affected, LastInsertID: id}, err
}

func (t textConn) Query(ctx context.Context, query string, args ...any) ([][][]byte, error) {
	q, err := Interpolate(query, args...)
	if err != nil {
		return nil, err
	}
	return t.c.Query(ctx, q)
}

func (t textConn) Release(broken bool) { t.c.Release(broken) }
