package reservation

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"

	"github.com/go-sql-driver/mysql"
)

// SQLConns implements Conns over database/sql with go-sql-driver/mysql: each
// borrow is one *sql.Conn. Tags are ignored (database/sql attributes
// nothing). Arguments are interpolated by Interpolate, so the DSN needs no
// interpolateParams and statements go over the text protocol. Errors from the
// server are returned as DBError. The engine and the refiller send several
// statements in one round trip (see Conn), so a DSN they use must have
// multiStatements=true; migrations and the reconciler send one at a time.
//
// It serves tests, `holdfast migrate` and the reconciler's replica
// connections; in production the engine borrows from holdfast's own pool.
func SQLConns(db *sql.DB) Conns { return sqlConns{db: db} }

type sqlConns struct{ db *sql.DB }

func (s sqlConns) Borrow(ctx context.Context, tag string) (Conn, error) {
	c, err := s.db.Conn(ctx)
	if err != nil {
		return nil, mapDriverError(err)
	}
	return &sqlConn{c: c}, nil
}

type sqlConn struct {
	c *sql.Conn
}

func (s *sqlConn) Exec(ctx context.Context, query string, args ...any) (Result, error) {
	q, err := Interpolate(query, args...)
	if err != nil {
		return Result{}, err
	}
	r, err := s.c.ExecContext(ctx, q)
	if err != nil {
		return Result{}, mapDriverError(err)
	}
	var out Result
	if n, err := r.RowsAffected(); err == nil && n > 0 {
		out.AffectedRows = uint64(n)
	}
	if id, err := r.LastInsertId(); err == nil && id > 0 {
		out.LastInsertID = uint64(id)
	}
	return out, nil
}

func (s *sqlConn) Query(ctx context.Context, query string, args ...any) ([][][]byte, error) {
	return sqlQuerier{s.c}.Query(ctx, query, args...)
}

// scanAll reads every row of every result set of rows, as Conn.Query
// returns them, and closes rows.
func scanAll(rows *sql.Rows) ([][][]byte, error) {
	defer rows.Close()
	var out [][][]byte
	for {
		cols, err := rows.Columns()
		if err != nil {
			return nil, mapDriverError(err)
		}
		raw := make([]sql.RawBytes, len(cols))
		dest := make([]any, len(cols))
		for i := range raw {
			dest[i] = &raw[i]
		}
		for rows.Next() {
			if err := rows.Scan(dest...); err != nil {
				return nil, mapDriverError(err)
			}
			row := make([][]byte, len(cols))
			for i, b := range raw {
				if b != nil {
					row[i] = append(make([]byte, 0, len(b)), b...)
				}
			}
			out = append(out, row)
		}
		// Every result set, as Conn.Query promises; a later statement's
		// error surfaces here.
		if !rows.NextResultSet() {
			break
		}
	}
	if err := rows.Err(); err != nil {
		return nil, mapDriverError(err)
	}
	return out, nil
}

func (s *sqlConn) Release(broken bool) {
	if broken {
		// Returning driver.ErrBadConn from Raw makes database/sql discard
		// the connection instead of pooling it.
		_ = s.c.Raw(func(any) error { return driver.ErrBadConn })
	}
	_ = s.c.Close()
}

// dbError is a server error with its MySQL number.
type dbError struct {
	num uint16
	err error
}

func (e *dbError) Error() string  { return e.err.Error() }
func (e *dbError) Number() uint16 { return e.num }
func (e *dbError) Unwrap() error  { return e.err }

func mapDriverError(err error) error {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		return &dbError{num: me.Number, err: err}
	}
	return err
}
