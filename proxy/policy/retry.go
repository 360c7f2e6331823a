package policy

import "github.com/holdfast-db/holdfast/proxy/sqlscan"

// RetryReadOnly reports whether a command answered 1290 ("running with the
// --read-only option") by a server since confirmed read-only (a primary
// being switched over) may be sent again, once, to the new primary: it is
// certain that nothing of it ran, and that sending it again cannot run
// anything twice. st is the session as the command found it, before its
// borrow.
//
// That holds for one statement (a text of several may have run some
// before the one refused) run on its own: in autocommit mode, outside a
// transaction (none open, no deferred BEGIN that went out with it: a
// transaction is rolled back instead), on a connection the session did not
// keep (pinned state lives on the former primary), and not LOAD DATA LOCAL
// (the client's file is not sent twice). The caller also checks that no
// byte of the answer has reached the client, and that it retries a
// statement at most once, whatever the path.
func RetryReadOnly(cmd Command, info *sqlscan.Info, st *Session) bool {
	switch {
	case !oneStatement(cmd, info):
		return false
	case st.InTxn || st.PendingBegin || st.Holding || st.Pinned || st.HoldNext || !st.Autocommit:
		return false
	}
	return true
}

// ReplayBegin reports whether a command answered 1290 by a server since
// confirmed read-only, the first of its transaction (st: the session as
// the command found it: the deferred BEGIN still pending, or sent with a
// prepare and nothing run since), may
// be sent again, once, with that BEGIN, to the new primary. The BEGIN ran
// on the former primary and the command was refused there, so the
// transaction had done nothing: no row read or written, no lock taken
// that outlives the connection, which is closed (rolling the BEGIN back).
// Sending both again is the transaction from its start, as the client
// sent it. The command itself must be one RetryReadOnly would take but for
// the transaction: one statement, not LOAD DATA LOCAL, from a session that
// kept no backend connection (nothing else of the session ran there).
func ReplayBegin(cmd Command, info *sqlscan.Info, st *Session) bool {
	fresh := st.PendingBegin && !st.Holding || st.FreshTxn
	return oneStatement(cmd, info) && fresh && !st.Pinned && !st.HoldNext
}

// oneStatement reports whether cmd is one statement that may be sent
// again without the client's part in it: not a text of several (some may
// have run before the one refused), not LOAD DATA LOCAL (the client's file
// is not sent twice).
func oneStatement(cmd Command, info *sqlscan.Info) bool {
	switch {
	case cmd != Query && cmd != Execute:
		return false
	case info == nil || info.Statements != 1:
		return false
	case info.Kind == sqlscan.KindLoadDataLocal || info.Features&sqlscan.FeatLocalInfile != 0:
		return false
	}
	return true
}
