package sqlscan

import (
	"strconv"
	"strings"
)

// Kind is the kind of the first statement in a text.
type Kind uint8

// Statement kinds. The zero Kind, KindOther, is every statement not listed,
// including compound statements (BEGIN NOT ATOMIC, IF, ...), EXPLAIN and DDL.
const (
	KindOther          Kind = iota
	KindSelect              // SELECT, (SELECT, WITH ... SELECT, VALUES, TABLE
	KindInsert              // INSERT (also WITH ... INSERT)
	KindUpdate              // UPDATE (also WITH ... UPDATE)
	KindDelete              // DELETE (also WITH ... DELETE)
	KindReplace             // REPLACE
	KindSet                 // a SET statement not listed below
	KindSetTransaction      // SET TRANSACTION ... without GLOBAL/SESSION/LOCAL: the next transaction only
	KindUse                 // USE db
	KindBegin               // BEGIN, BEGIN WORK, START TRANSACTION ...; not BEGIN NOT ATOMIC
	KindCommit              // COMMIT ...
	KindRollback            // ROLLBACK ...; not ROLLBACK [WORK] TO [SAVEPOINT] x (KindOther)
	KindKill                // KILL ...; see Info.Kill
	KindLoadData            // LOAD DATA / LOAD XML without LOCAL
	KindLoadDataLocal       // LOAD DATA / LOAD XML ... LOCAL INFILE
	KindCall                // CALL
	KindPrepare             // SQL-level PREPARE name FROM ...
	KindExecute             // SQL-level EXECUTE name [USING ...], MariaDB EXECUTE IMMEDIATE
	KindDeallocate          // DEALLOCATE PREPARE / DROP PREPARE
	KindLockTables          // LOCK TABLE(S), FLUSH TABLES ... WITH READ LOCK, FLUSH TABLES ... FOR EXPORT
	KindUnlockTables        // UNLOCK TABLE(S)
	KindShow                // SHOW ...
	KindXA                  // XA ...
	KindHandler             // HANDLER ...
	KindDo                  // DO ...
	numKinds
)

var kindNames = [numKinds]string{
	KindOther:          "other",
	KindSelect:         "select",
	KindInsert:         "insert",
	KindUpdate:         "update",
	KindDelete:         "delete",
	KindReplace:        "replace",
	KindSet:            "set",
	KindSetTransaction: "set_transaction",
	KindUse:            "use",
	KindBegin:          "begin",
	KindCommit:         "commit",
	KindRollback:       "rollback",
	KindKill:           "kill",
	KindLoadData:       "load_data",
	KindLoadDataLocal:  "load_data_local",
	KindCall:           "call",
	KindPrepare:        "prepare",
	KindExecute:        "execute",
	KindDeallocate:     "deallocate",
	KindLockTables:     "lock_tables",
	KindUnlockTables:   "unlock_tables",
	KindShow:           "show",
	KindXA:             "xa",
	KindHandler:        "handler",
	KindDo:             "do",
}

// String returns the kind's name in snake case ("select", "set_transaction"),
// suitable as a bounded metric label value.
func (k Kind) String() string {
	if k < numKinds {
		return kindNames[k]
	}
	return "Kind(" + strconv.Itoa(int(k)) + ")"
}

// Feature is a bit set of session-affecting constructs found in a text,
// OR-ed over all of its statements. Only code counts: text inside string
// literals, quoted identifiers and ordinary comments never sets a bit, while
// executable comments (/*! ... */, /*M! ... */) are code.
type Feature uint32

// Features. Several are deliberately conservative: a bit may be set for a
// statement that turns out not to need it, never the reverse for the forms
// listed.
const (
	// FeatUserVarAssign: a user variable may be assigned: SET @x = ..,
	// SET a=1, @y:=2, ":=" anywhere, INTO @x (SELECT ... INTO @a, @b), and any
	// user variable in a CALL or EXECUTE statement (OUT and INOUT parameters
	// assign it).
	FeatUserVarAssign Feature = 1 << iota
	// FeatUserVarRef: any user variable is mentioned: @name, @`name`,
	// @'name', @"name" (not @@system variables, not the host of 'u'@'h').
	FeatUserVarRef
	// FeatTempTable: CREATE [OR REPLACE] TEMPORARY TABLE.
	FeatTempTable
	// FeatGetLock: a GET_LOCK( function call.
	FeatGetLock
	// FeatLockTables: LOCK TABLE(S), FLUSH TABLES ... WITH READ LOCK or
	// FOR EXPORT, and the instance-wide session locks LOCK INSTANCE FOR
	// BACKUP and MariaDB's BACKUP LOCK.
	FeatLockTables
	// FeatSQLPrepare: SQL-level PREPARE name FROM ..., wherever it stands
	// (a handler's body too). Scan does not read the statement text it
	// prepares (see Mode.AppendDynamic).
	FeatSQLPrepare
	// FeatCalcFoundRows: SQL_CALC_FOUND_ROWS.
	FeatCalcFoundRows
	// FeatHandler: HANDLER tbl OPEN.
	FeatHandler
	// FeatXA: XA START / XA BEGIN.
	FeatXA
	// FeatSetSession: a SET that changes session system variables: SET NAMES,
	// SET CHARACTER SET / CHARSET, SET [SESSION|LOCAL] var=, SET @@var=,
	// SET @@session.var=, SET @@local.var=, SET var=, SET SESSION TRANSACTION.
	FeatSetSession
	// FeatSetGlobal: SET GLOBAL|PERSIST|PERSIST_ONLY var=, SET @@global.var=,
	// SET GLOBAL TRANSACTION.
	FeatSetGlobal
	// FeatSetTransaction: SET TRANSACTION ... (next-transaction scope). Also
	// set, together with FeatSetSession, for SET @@transaction_isolation,
	// @@tx_isolation, @@transaction_read_only and @@tx_read_only without a
	// scope, which MySQL applies to the next transaction only.
	FeatSetTransaction
	// FeatLocalInfile: LOAD DATA / LOAD XML ... LOCAL.
	FeatLocalInfile
	// FeatLastInsertID: a LAST_INSERT_ID( function call, or @@identity or
	// @@last_insert_id (the same value), with or without a session or
	// local scope.
	FeatLastInsertID
	// FeatFoundRowsFunc: a FOUND_ROWS( function call.
	FeatFoundRowsFunc
	// FeatSetStatement: MariaDB SET STATEMENT var=value[, ...] FOR <stmt>; the
	// inner statement is classified too, and its assignments are per-statement
	// (they set no FeatSetSession).
	FeatSetStatement
	// FeatSetNames: SET NAMES ... (which also gives the results' collation,
	// unlike setting character_set_results alone).
	FeatSetNames
	// FeatKill: a KILL statement, as any statement of the text.
	FeatKill
	// FeatConnectionID: a CONNECTION_ID( function call.
	FeatConnectionID
	// FeatFuncCall: a call of a function that is not built in, so possibly
	// a stored function, which can change session state or write: a name
	// followed by '(' that is neither a reserved word nor a built-in
	// (see builtinNames), or a quoted or qualified one (`f`(, db.f().
	// Table and routine names where a parenthesised list follows (INSERT
	// INTO t (a), CREATE TABLE t (, REFERENCES t (, WITH cte (a) AS,
	// CREATE INDEX i ON t (, CALL p() are not calls.
	FeatFuncCall
	// FeatLocking: a locking read: FOR UPDATE, FOR SHARE, LOCK IN SHARE
	// MODE (its rows stay locked to the end of the transaction).
	FeatLocking
	// FeatSideEffect: a SELECT that writes, or reads what is the session's
	// own, beyond the features above: the sequence functions NEXTVAL(,
	// SETVAL(, LASTVAL(, NEXT VALUE FOR and PREVIOUS VALUE FOR, and INTO
	// OUTFILE / INTO DUMPFILE (a file on the server).
	FeatSideEffect
	// FeatExecImmediate: MariaDB's EXECUTE IMMEDIATE, wherever it stands,
	// which runs the statement text its argument gives (Scan does not read
	// it: see Mode.AppendDynamic).
	FeatExecImmediate
	// FeatRowCount: a ROW_COUNT( function call, which reads what the
	// connection's previous statement did.
	FeatRowCount
	// FeatLockInfo: an IS_FREE_LOCK( or IS_USED_LOCK( function call, which
	// reads the server's user-level locks (GET_LOCK's): the primary's, never
	// a replica's.
	FeatLockInfo
	numFeatures = iota
)

var featureNames = [numFeatures]string{
	"user_var_assign", "user_var_ref", "temp_table", "get_lock", "lock_tables",
	"sql_prepare", "calc_found_rows", "handler", "xa", "set_session", "set_global",
	"set_transaction", "local_infile", "last_insert_id", "found_rows_func", "set_statement",
	"set_names", "kill", "connection_id", "func_call", "locking", "side_effect",
	"exec_immediate", "row_count", "lock_info",
}

// String returns the set's names joined by '|' ("user_var_ref|get_lock"), or
// "none". Each name is a bounded label value; String allocates.
func (f Feature) String() string {
	if f == 0 {
		return "none"
	}
	var b strings.Builder
	for i := 0; i < 32; i++ {
		if f&(1<<i) == 0 {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('|')
		}
		if i < numFeatures {
			b.WriteString(featureNames[i])
		} else {
			b.WriteString("Feature(1<<" + strconv.Itoa(i) + ")")
		}
	}
	return b.String()
}
