package policy

import "github.com/holdfast-db/holdfast/proxy/sqlscan"

// Transaction replay (failover.transaction_replay): a transaction open on
// a former primary when the primary switched is rolled back there, and may
// be run again from its BEGIN on the new primary when each of its
// statements answers there exactly as it answered the client. These rules
// say which statements a transaction may have run, and which refused
// command may be sent again after the replay.

// replayFeatures are the features a recorded statement may have: a locking
// read (its locks are taken again), and reads of what the connection's
// previous statements did (LAST_INSERT_ID(), FOUND_ROWS(), ROW_COUNT()),
// which the replay runs again in the same order, its answers checked.
const replayFeatures = sqlscan.FeatLocking | sqlscan.FeatLastInsertID | sqlscan.FeatFoundRowsFunc | sqlscan.FeatRowCount

// NotReplayable says why a statement that ran in a transaction keeps the
// transaction from being replayed ("" when it does not). A transaction may
// be replayed when every statement it ran was one typed statement reading
// or writing rows (SELECT, INSERT, UPDATE, DELETE, REPLACE), touching no
// session state and nothing outside the transaction: no variables, no
// locks but row locks, no stored functions (which may write where a
// rollback does not reach), no sequences, no LOAD DATA LOCAL; or such a
// statement prepared (an Execute, prepared again for the replay; the
// caller checks that it opens no cursor and sends no long data).
func NotReplayable(cmd Command, info *sqlscan.Info) string {
	switch {
	case cmd != Query && cmd != Execute:
		return "it ran a " + cmd.String()
	case info == nil || info.Statements != 1:
		return "it ran a text of several statements"
	}
	switch info.Kind {
	case sqlscan.KindSelect, sqlscan.KindInsert, sqlscan.KindUpdate, sqlscan.KindDelete, sqlscan.KindReplace:
	default:
		return "it ran a " + info.Kind.String() + " statement"
	}
	if f := info.Features &^ replayFeatures; f != 0 {
		return "it ran a statement that touches session state or more than rows (" + f.String() + ")"
	}
	return ""
}

// ReplayTxn reports whether a command answered 1290 by a server since
// confirmed read-only, inside a transaction that ran statements there
// (st: the session as the command found it), may be sent again, once,
// after its transaction was replayed on the new primary: one statement,
// not LOAD DATA LOCAL, in an open transaction of a session not pinned.
// The caller checks that the transaction was recorded whole and that
// nothing of the command's answer reached the client.
func ReplayTxn(cmd Command, info *sqlscan.Info, st *Session) bool {
	return oneStatement(cmd, info) && st.InTxn && !st.PendingBegin && !st.Pinned && !st.HoldNext
}
