package controls

import (
	"fmt"
	"strings"

	"github.com/holdfast-db/holdfast/proxy/sqlscan"
)

// ReadOnlyKind makes the tags matching its key read-only, for an incident
// such as a runaway batch: their statements that may write are refused
// with error 9011 before they run. Any source's readonly holds (it
// merges strictest); it has no value.
var ReadOnlyKind = Register(&Kind{
	Name: "readonly", Doc: "statements that may write refused (9011)",
	Merge: Strictest, Effect: EffectRefusal, Pattern: true,
	Show:   func(int64) string { return "read-only" },
	Refuse: refuseWrites,
})

// CodeReadOnly is the error of a statement a readonly control refuses,
// with SQLSTATE 25006 (read-only SQL-transaction).
const CodeReadOnly = 9011

// refuseWrites refuses a statement of key that may write.
func refuseWrites(c Control, key string, info sqlscan.Info) error {
	what := mayWrite(&info)
	if what == "" {
		return nil
	}
	by := ""
	switch {
	case c.Reason != "":
		by = " (" + c.Reason + ")"
	case c.SetBy != "":
		by = " (set by " + c.SetBy + ")"
	}
	under := ""
	if c.Key != key {
		under = " under " + c.Key
	}
	return &Refusal{Code: CodeReadOnly, State: "25006", Msg: fmt.Sprintf(
		"holdfast: tag '%s' is read-only by on-call%s%s: %s is refused, nothing ran; its reads, SHOW, SET, USE, BEGIN, COMMIT and ROLLBACK still run",
		key, under, by, what)}
}

// mayWrite names what in a statement a read-only tag refuses, "" when it
// passes: a plain read (a SELECT without a locking clause, a call of a
// function that is not built in, or a side effect), SHOW, a SET of the
// session's (not SET GLOBAL), USE, BEGIN, COMMIT, ROLLBACK, and what only
// ends something: KILL, DEALLOCATE PREPARE, UNLOCK TABLES. Everything
// else may write (DDL, CALL, CALL holdfast.* above all, dynamic SQL), and
// so does a text of several statements, of which only the first's kind
// is known. An empty text passes (the server answers it).
func mayWrite(info *sqlscan.Info) string {
	f := info.Features
	switch {
	case info.Statements == 0:
		return ""
	case info.Statements > 1:
		return fmt.Sprintf("a text of %d statements", info.Statements)
	case f&sqlscan.FeatLocking != 0:
		return "a locking read (FOR UPDATE, FOR SHARE, LOCK IN SHARE MODE)"
	case f&sqlscan.FeatSideEffect != 0:
		return "a statement with a side effect (INTO OUTFILE, a sequence's NEXTVAL)"
	case f&sqlscan.FeatFuncCall != 0:
		return "a call of a function that is not built in (a stored function may write)"
	case f&(sqlscan.FeatExecImmediate|sqlscan.FeatSQLPrepare) != 0:
		return "dynamic SQL (PREPARE, EXECUTE IMMEDIATE)"
	case f&sqlscan.FeatSetGlobal != 0:
		return "SET GLOBAL"
	}
	switch info.Kind {
	case sqlscan.KindSelect, sqlscan.KindShow, sqlscan.KindSet, sqlscan.KindSetTransaction, sqlscan.KindUse,
		sqlscan.KindBegin, sqlscan.KindCommit, sqlscan.KindRollback,
		sqlscan.KindKill, sqlscan.KindDeallocate, sqlscan.KindUnlockTables:
		return ""
	case sqlscan.KindCall:
		return "CALL (a procedure may write; CALL holdfast.* does)"
	case sqlscan.KindOther:
		return "this statement (DDL, or another that may write)"
	}
	return strings.ToUpper(strings.ReplaceAll(info.Kind.String(), "_", " "))
}
