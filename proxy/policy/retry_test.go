package policy

import (
	"testing"

	"github.com/holdfast-db/holdfast/proxy/sqlscan"
)

func TestRetryReadOnly(t *testing.T) {
	free := Session{Autocommit: true, VarsKnown: true}
	checkRule(t, "RetryReadOnly", RetryReadOnly, free, []ruleCase{
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
	})
}

func TestReplayBegin(t *testing.T) {
	begun := Session{Autocommit: true, VarsKnown: true, InTxn: true, PendingBegin: true}
	checkRule(t, "ReplayBegin", ReplayBegin, begun, []ruleCase{
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
	})
}

// ruleCase is one command, on a session changed from a base one by st.
type ruleCase struct {
	name string
	cmd  Command
	sql  string
	st   func(*Session)
	want bool
}

// checkRule checks rule (named name) against each case.
func checkRule(t *testing.T, name string, rule func(Command, *sqlscan.Info, *Session) bool, base Session, cases []ruleCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st := base
			if tc.st != nil {
				tc.st(&st)
			}
			var info *sqlscan.Info
			if tc.sql != "" {
				i := sqlscan.Scan([]byte(tc.sql))
				info = &i
			}
			if got := rule(tc.cmd, info, &st); got != tc.want {
				t.Fatalf("%s(%s, %q, %+v) = %v, want %v", name, tc.cmd, tc.sql, st, got, tc.want)
			}
		})
	}
}
