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
	case cmd != Query && cmd != Execute:
		return false
	case info == nil || info.Statements != 1:
		return false
	case info.Kind == sqlscan.KindLoadDataLocal || info.Features&sqlscan.FeatLocalInfile != 0:
		return false
	case st.InTxn || st.PendingBegin || st.Holding || st.Pinned || st.HoldNext || !st.Autocommit:
		return false
	}
	return true
}
