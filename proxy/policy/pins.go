package policy

import (
	"github.com/holdfast-db/holdfast/attribution"
	"github.com/holdfast-db/holdfast/proxy/sqlscan"
	"github.com/holdfast-db/holdfast/proxy/varstate"
)

// What a statement's answer did to the session: whether it ties the
// session to its connection (a pin), and whether its reports of changed
// state are to be believed. Pure, like Decide; the session's state
// (proxy/sessionstate) asks after each statement.

// featurePins are the statement features that pin a session, each with
// the reason it is counted under, in the order PinReason tries them.
var featurePins = [...]struct {
	feat   sqlscan.Feature
	reason string
}{
	{sqlscan.FeatTempTable, attribution.PinTemporaryTable},
	{sqlscan.FeatUserVarAssign, attribution.PinUserVariable},
	{sqlscan.FeatGetLock, attribution.PinGetLock},
	{sqlscan.FeatLockTables, attribution.PinLockTables},
	{sqlscan.FeatSQLPrepare, attribution.PinSQLPrepare},
	{sqlscan.FeatCalcFoundRows, attribution.PinFoundRows},
	{sqlscan.FeatHandler, attribution.PinHandler},
	{sqlscan.FeatXA, attribution.PinXA},
}

// FeaturePin is the pin a statement causes by its text alone (what
// explain shows), or "".
func FeaturePin(info *sqlscan.Info) string {
	if info == nil {
		return ""
	}
	for _, p := range featurePins {
		if info.Features&p.feat != 0 {
			return p.reason
		}
	}
	return ""
}

// PinReason names why a statement of info (nil: a command without a
// statement) ties the session to its backend connection for good, given
// what its answer reported (sc) and whether it left a cursor open, or
// returns "".
func PinReason(info *sqlscan.Info, cursor bool, sc *varstate.Report) string {
	if cursor {
		return attribution.PinCursor
	}
	if sc.Pin != "" {
		return sc.Pin
	}
	if r := FeaturePin(info); r != "" {
		return r
	}
	if sc.Changed {
		// State changed: fine only when the tracker told us everything
		// (system variables, schema) and the statement is a SET or USE,
		// or when the change was SET STATEMENT's own and is over. A
		// change reported by an EOF packet (a stored function called in a
		// SELECT, a procedure's result set) is never explained: its
		// variables reach the next OK on this connection, which is then
		// the session's own.
		explained := info != nil && !sc.EOFChanged && (info.Kind == sqlscan.KindSet || info.Kind == sqlscan.KindUse) &&
			(len(sc.Vars) > 0 || sc.SchemaSet || sc.KeptSet) || StatementScoped(info) || sc.EOFChanged && !MayChangeState(info)
		if !explained {
			return attribution.PinSessionState
		}
	}
	return ""
}

// StatementScoped reports whether a statement's session changes all end
// with it: SET STATEMENT ... FOR a statement that sets no variable itself
// and calls no stored function or procedure. (A trigger that changes
// session state is not seen.)
func StatementScoped(info *sqlscan.Info) bool {
	if info == nil || info.Features&sqlscan.FeatSetStatement == 0 || info.Features&sqlscan.FeatFuncCall != 0 || info.Statements != 1 {
		return false
	}
	switch info.Kind {
	case sqlscan.KindCall, sqlscan.KindExecute, sqlscan.KindSet, sqlscan.KindSetTransaction:
		return false
	}
	return true
}

// MayChangeState reports whether a statement may change session state
// that a result set's EOF cannot report: it calls a stored function or
// procedure, runs an SQL-level prepared statement, or is of a kind
// holdfast does not classify (compound statements among them). A command
// without a statement (nil) may.
func MayChangeState(info *sqlscan.Info) bool {
	if info == nil || info.Features&sqlscan.FeatFuncCall != 0 {
		return true
	}
	switch info.Kind {
	case sqlscan.KindCall, sqlscan.KindExecute, sqlscan.KindOther:
		return true
	}
	return false
}
