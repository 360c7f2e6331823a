package policy

import (
	"testing"

	"github.com/holdfast-db/holdfast/proxy/sqlscan"
)

func TestRetryReadOnly(t *testing.T) {
	free := Session{Autocommit: true, VarsKnown: true}
	for _, tc := range []struct {
		name string
		cmd  Command
		sql  string
		st   func(*Session)
		want bool
	}{
		{"an autocommit insert", Query, "INSERT INTO t VALUES (1)", nil, true},
		{"a prepared insert", Execute, "INSERT INTO t VALUES (?)", nil, true},
		{"an update", Query, "UPDATE t SET a = 1", nil, true},
		{"a text of two statements", Query, "INSERT INTO t VALUES (1); INSERT INTO t VALUES (2)", nil, false},
		{"LOAD DATA LOCAL", Query, "LOAD DATA LOCAL INFILE 'x' INTO TABLE t", nil, false},
		{"inside a transaction", Query, "INSERT INTO t VALUES (1)", func(s *Session) { s.InTxn = true }, false},
		{"after a deferred BEGIN", Query, "INSERT INTO t VALUES (1)", func(s *Session) { s.InTxn, s.PendingBegin = true, true }, false},
		{"on a kept connection", Query, "INSERT INTO t VALUES (1)", func(s *Session) { s.Holding = true }, false},
		{"pinned", Query, "INSERT INTO t VALUES (1)", func(s *Session) { s.Pinned, s.Holding = true, true }, false},
		{"after SET TRANSACTION", Query, "INSERT INTO t VALUES (1)", func(s *Session) { s.HoldNext = true }, false},
		{"autocommit off", Query, "INSERT INTO t VALUES (1)", func(s *Session) { s.Autocommit = false }, false},
		{"COM_INIT_DB", InitDB, "", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := free
			if tc.st != nil {
				tc.st(&st)
			}
			var info *sqlscan.Info
			if tc.sql != "" {
				i := sqlscan.Scan([]byte(tc.sql))
				info = &i
			}
			if got := RetryReadOnly(tc.cmd, info, &st); got != tc.want {
				t.Fatalf("RetryReadOnly(%s, %q, %+v) = %v, want %v", tc.cmd, tc.sql, st, got, tc.want)
			}
		})
	}
}

func TestReplayBegin(t *testing.T) {
	begun := Session{Autocommit: true, VarsKnown: true, InTxn: true, PendingBegin: true}
	for _, tc := range []struct {
		name string
		cmd  Command
		sql  string
		st   func(*Session)
		want bool
	}{
		{"the first insert of a transaction", Query, "INSERT INTO t VALUES (1)", nil, true},
		{"a prepared first insert", Execute, "INSERT INTO t VALUES (?)", nil, true},
		{"the first execute, its prepare having sent BEGIN", Execute, "INSERT INTO t VALUES (?)", func(s *Session) { s.PendingBegin, s.Holding, s.FreshTxn = false, true, true }, true},
		{"pinned after its prepare sent BEGIN", Execute, "INSERT INTO t VALUES (?)", func(s *Session) { s.PendingBegin, s.Holding, s.FreshTxn, s.Pinned = false, true, true, true }, false},
		{"the first update, autocommit off", Query, "UPDATE t SET a = 1", func(s *Session) { s.Autocommit = false }, true},
		{"a later statement of the transaction", Query, "INSERT INTO t VALUES (1)", func(s *Session) { s.PendingBegin, s.Holding = false, true }, false},
		{"outside a transaction", Query, "INSERT INTO t VALUES (1)", func(s *Session) { s.InTxn, s.PendingBegin = false, false }, false},
		{"a text of two statements", Query, "INSERT INTO t VALUES (1); INSERT INTO t VALUES (2)", nil, false},
		{"LOAD DATA LOCAL", Query, "LOAD DATA LOCAL INFILE 'x' INTO TABLE t", nil, false},
		{"on a kept connection", Query, "INSERT INTO t VALUES (1)", func(s *Session) { s.Holding = true }, false},
		{"pinned", Query, "INSERT INTO t VALUES (1)", func(s *Session) { s.Pinned, s.Holding = true, true }, false},
		{"after SET TRANSACTION", Query, "INSERT INTO t VALUES (1)", func(s *Session) { s.HoldNext = true }, false},
		{"COM_INIT_DB", InitDB, "", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := begun
			if tc.st != nil {
				tc.st(&st)
			}
			var info *sqlscan.Info
			if tc.sql != "" {
				i := sqlscan.Scan([]byte(tc.sql))
				info = &i
			}
			if got := ReplayBegin(tc.cmd, info, &st); got != tc.want {
				t.Fatalf("ReplayBegin(%s, %q, %+v) = %v, want %v", tc.cmd, tc.sql, st, got, tc.want)
			}
		})
	}
}
