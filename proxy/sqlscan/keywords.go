package sqlscan

import "strings"

// kw identifies the few words Scan, ParseCall and AppendDigest act on.
type kw uint8

const (
	kwNone kw = iota
	kwAs
	kwAtomic
	kwBackup
	kwBegin
	kwCall
	kwCharacter
	kwCharset
	kwCommit
	kwConcurrent
	kwConnection
	kwConnectionID
	kwCreate
	kwData
	kwDeallocate
	kwDefault
	kwDelete
	kwDo
	kwDrop
	kwElse
	kwExecute
	kwExport
	kwFalse
	kwFlush
	kwFor
	kwFoundRows
	kwGetLock
	kwNextval
	kwSetval
	kwLastval
	kwNext
	kwPrevious
	kwOutfile
	kwDumpfile
	kwGlobal
	kwHandler
	kwHard
	kwID
	kwIn
	kwInsert
	kwInstance
	kwInto
	kwKill
	kwLastInsertID
	kwLoad
	kwLocal
	kwLock
	kwLoop
	kwLowPriority
	kwNames
	kwNoWriteToBinlog
	kwNot
	kwNull
	kwOpen
	kwOr
	kwPassword
	kwPersist
	kwPersistOnly
	kwPrepare
	kwQuery
	kwRead
	kwRepeat
	kwReplace
	kwResource
	kwRole
	kwRollback
	kwSelect
	kwSession
	kwSet
	kwShow
	kwSoft
	kwSQLCalcFoundRows
	kwStart
	kwStatement
	kwTable
	kwTables
	kwTemporary
	kwThen
	kwTo
	kwTransaction
	kwTrue
	kwUnlock
	kwUpdate
	kwUse
	kwUser
	kwValue
	kwValues
	kwWith
	kwWork
	kwXA
	kwXML
	kwFunction
	kwIndex
	kwKey
	kwOn
	kwProcedure
	kwReferences
	kwTrigger
	kwView
	kwShare
	kwMode
	kwRowCount
	kwIsFreeLock
	kwIsUsedLock
)

// kwWords are the words of the kw values, in lower case.
var kwWords = [...]string{
	kwAs:               "as",
	kwAtomic:           "atomic",
	kwBackup:           "backup",
	kwBegin:            "begin",
	kwCall:             "call",
	kwCharacter:        "character",
	kwCharset:          "charset",
	kwCommit:           "commit",
	kwConcurrent:       "concurrent",
	kwConnection:       "connection",
	kwConnectionID:     "connection_id",
	kwCreate:           "create",
	kwData:             "data",
	kwDeallocate:       "deallocate",
	kwDefault:          "default",
	kwDelete:           "delete",
	kwDo:               "do",
	kwDrop:             "drop",
	kwElse:             "else",
	kwExecute:          "execute",
	kwExport:           "export",
	kwFalse:            "false",
	kwFlush:            "flush",
	kwFor:              "for",
	kwFoundRows:        "found_rows",
	kwGetLock:          "get_lock",
	kwNextval:          "nextval",
	kwSetval:           "setval",
	kwLastval:          "lastval",
	kwNext:             "next",
	kwPrevious:         "previous",
	kwOutfile:          "outfile",
	kwDumpfile:         "dumpfile",
	kwGlobal:           "global",
	kwHandler:          "handler",
	kwHard:             "hard",
	kwID:               "id",
	kwIn:               "in",
	kwInsert:           "insert",
	kwInstance:         "instance",
	kwInto:             "into",
	kwKill:             "kill",
	kwLastInsertID:     "last_insert_id",
	kwLoad:             "load",
	kwLocal:            "local",
	kwLock:             "lock",
	kwLoop:             "loop",
	kwLowPriority:      "low_priority",
	kwNames:            "names",
	kwNoWriteToBinlog:  "no_write_to_binlog",
	kwNot:              "not",
	kwNull:             "null",
	kwOpen:             "open",
	kwOr:               "or",
	kwPassword:         "password",
	kwPersist:          "persist",
	kwPersistOnly:      "persist_only",
	kwPrepare:          "prepare",
	kwQuery:            "query",
	kwRead:             "read",
	kwRepeat:           "repeat",
	kwReplace:          "replace",
	kwResource:         "resource",
	kwRole:             "role",
	kwRollback:         "rollback",
	kwSelect:           "select",
	kwSession:          "session",
	kwSet:              "set",
	kwShow:             "show",
	kwSoft:             "soft",
	kwSQLCalcFoundRows: "sql_calc_found_rows",
	kwStart:            "start",
	kwStatement:        "statement",
	kwTable:            "table",
	kwTables:           "tables",
	kwTemporary:        "temporary",
	kwThen:             "then",
	kwTo:               "to",
	kwTransaction:      "transaction",
	kwTrue:             "true",
	kwUnlock:           "unlock",
	kwUpdate:           "update",
	kwUse:              "use",
	kwUser:             "user",
	kwValue:            "value",
	kwValues:           "values",
	kwWith:             "with",
	kwWork:             "work",
	kwXA:               "xa",
	kwXML:              "xml",
	kwFunction:         "function",
	kwIndex:            "index",
	kwKey:              "key",
	kwOn:               "on",
	kwProcedure:        "procedure",
	kwReferences:       "references",
	kwTrigger:          "trigger",
	kwView:             "view",
	kwShare:            "share",
	kwMode:             "mode",
	kwRowCount:         "row_count",
	kwIsFreeLock:       "is_free_lock",
	kwIsUsedLock:       "is_used_lock",
}

// kwHashTable is an open-addressing hash table of the kw values, indexed by
// kwHash, so that most identifiers are rejected after one probe.
var kwHashTable = func() (t [256]kw) {
	for k, name := range kwWords {
		if name == "" {
			continue
		}
		h := kwHash([]byte(name))
		for t[h] != kwNone {
			h++
		}
		t[h] = kw(k)
	}
	return t
}()

func kwHash(b []byte) uint8 {
	return uint8(len(b)*7 + int(b[0]|0x20)*31 + int(b[len(b)-1]|0x20)*3 + int(b[1]|0x20))
}

// lookupKW returns the kw for word b, matched case-insensitively, or kwNone.
// It does not allocate.
func lookupKW(b []byte) kw {
	if len(b) < 2 {
		return kwNone
	}
	for h := kwHash(b); ; h++ {
		k := kwHashTable[h]
		if k == kwNone {
			return kwNone
		}
		if eqFold(b, kwWords[k]) {
			return k
		}
	}
}

// reservedWords are MySQL 8.0 / MariaDB reserved words: an unquoted alias
// cannot be one of them. AppendDigest upper-cases them and keywords.
const reservedWords = `ACCESSIBLE ADD ALL ALTER ANALYZE AND AS ASC ASENSITIVE BEFORE BETWEEN BIGINT
BINARY BLOB BOTH BY CALL CASCADE CASE CHANGE CHAR CHARACTER CHECK COLLATE COLUMN CONDITION
CONSTRAINT CONTINUE CONVERT CREATE CROSS CUBE CUME_DIST CURRENT_DATE CURRENT_ROLE CURRENT_TIME
CURRENT_TIMESTAMP CURRENT_USER CURSOR DATABASE DATABASES DAY_HOUR DAY_MICROSECOND DAY_MINUTE
DAY_SECOND DEC DECIMAL DECLARE DEFAULT DELAYED DELETE DENSE_RANK DESC DESCRIBE DETERMINISTIC
DISTINCT DISTINCTROW DIV DOUBLE DROP DUAL EACH ELSE ELSEIF EMPTY ENCLOSED ESCAPED EXCEPT EXISTS
EXIT EXPLAIN FALSE FETCH FIRST_VALUE FLOAT FLOAT4 FLOAT8 FOR FORCE FOREIGN FROM FULLTEXT
FUNCTION GENERATED GET GRANT GROUP GROUPING GROUPS HAVING HIGH_PRIORITY HOUR_MICROSECOND
HOUR_MINUTE HOUR_SECOND IF IGNORE IN INDEX INFILE INNER INOUT INSENSITIVE INSERT INT INT1 INT2
INT3 INT4 INT8 INTEGER INTERSECT INTERVAL INTO IO_AFTER_GTIDS IO_BEFORE_GTIDS IS ITERATE JOIN
JSON_TABLE KEY KEYS KILL LAG LAST_VALUE LATERAL LEAD LEADING LEAVE LEFT LIKE LIMIT LINEAR LINES
LOAD LOCALTIME LOCALTIMESTAMP LOCK LONG LONGBLOB LONGTEXT LOOP LOW_PRIORITY MASTER_BIND
MASTER_SSL_VERIFY_SERVER_CERT MATCH MAXVALUE MEDIUMBLOB MEDIUMINT MEDIUMTEXT MIDDLEINT
MINUTE_MICROSECOND MINUTE_SECOND MOD MODIFIES NATURAL NOT NO_WRITE_TO_BINLOG NTH_VALUE NTILE
NULL NUMERIC OF OFFSET ON OPTIMIZE OPTIMIZER_COSTS OPTION OPTIONALLY OR ORDER OUT OUTER OUTFILE
OVER PARTITION PERCENT_RANK PRECISION PRIMARY PROCEDURE PURGE RANGE RANK READ READS READ_WRITE
REAL RECURSIVE REFERENCES REGEXP RELEASE RENAME REPEAT REPLACE REQUIRE RESIGNAL RESTRICT RETURN
RETURNING REVOKE RIGHT RLIKE ROW ROWS ROW_NUMBER SCHEMA SCHEMAS SECOND_MICROSECOND SELECT
SENSITIVE SEPARATOR SET SHOW SIGNAL SMALLINT SPATIAL SPECIFIC SQL SQLEXCEPTION SQLSTATE
SQLWARNING SQL_BIG_RESULT SQL_CALC_FOUND_ROWS SQL_SMALL_RESULT SSL STARTING STORED
STRAIGHT_JOIN SYSTEM TABLE TERMINATED THEN TINYBLOB TINYINT TINYTEXT TO TRAILING TRIGGER TRUE
UNDO UNION UNIQUE UNLOCK UNSIGNED UPDATE USAGE USE USING UTC_DATE UTC_TIME UTC_TIMESTAMP VALUES
VARBINARY VARCHAR VARCHARACTER VARYING VIRTUAL WHEN WHERE WHILE WINDOW WITH WRITE XOR YEAR_MONTH
ZEROFILL`

// otherKeywords are common non-reserved keywords and built-in function
// names. AppendDigest upper-cases them; they may be used as bare aliases.
const otherKeywords = `ACTION AFTER AGAINST ALGORITHM ANY AT ATOMIC AUTOCOMMIT AUTO_INCREMENT AVG
BACKUP BEGIN BINLOG BIT BOOL BOOLEAN BTREE CASCADED CAST CHAIN CHARSET CLOSE COALESCE
COLLATION COLUMNS COMMENT COMMIT COMMITTED COMPACT CONCAT CONCURRENT CONNECTION CONSISTENT
COUNT DATA DATE DATETIME DEALLOCATE DEFINER DISABLE DISCARD DO DUPLICATE DYNAMIC ENABLE END
ENGINE ENGINES ENUM ERRORS EVENT EVENTS EXCHANGE EXECUTE EXPANSION EXPORT EXTENDED FIELDS
FIXED FLUSH FOLLOWING FORMAT FOUND FOUND_ROWS FULL GET_LOCK GLOBAL GRANTS HANDLER HARD HASH
HELP HOSTS IDENTIFIED IFNULL IMMEDIATE INDEXES INSTANCE INVOKER ISOLATION JSON KILL LAST
LAST_INSERT_ID LESS LEVEL LOCAL LOCKED LOGS MAX MEDIUM MERGE MIN MODE MODIFY NAMES NEXT NO
NONE NOW NOWAIT OFFSET ONLY OPEN PASSWORD PERSIST PERSIST_ONLY PLUGINS PRECEDING PREPARE
PRESERVE PREV PRIVILEGES PROCESSLIST PROFILE QUERY QUICK REDUNDANT RELEASE_LOCK RELOAD
REPAIR REPEATABLE RESET RESTORE RESUME ROLE ROLLBACK ROLLUP SAVEPOINT SECURITY SERIALIZABLE
SESSION SHARE SHUTDOWN SIGNED SKIP SLAVE SNAPSHOT SOFT SOME SQL_CACHE SQL_NO_CACHE START
STATEMENT STATUS STOP SUBSTRING SUM SUSPEND TABLES TEMPORARY TEMPTABLE TEXT TIME TIMESTAMP
TRANSACTION TRIGGERS TRUNCATE UNBOUNDED UNCOMMITTED UNKNOWN USER VALUE VARIABLES VIEW WAIT
WARNINGS WORK XA XML`

// kwEntry is one keyword of keywordTable.
type kwEntry struct {
	upper, lower string
	reserved     bool
}

// keywordTable is an open-addressing hash table of reservedWords and
// otherKeywords, indexed by kwFoldHash: a keyword is found, and most other
// words rejected, without upper-casing them first.
var keywordTable = func() (t [kwTableSize]kwEntry) {
	add := func(words string, reserved bool) {
		for _, w := range strings.Fields(words) {
			h := kwFoldHash([]byte(w))
			for t[h].upper != "" && t[h].upper != w {
				h = (h + 1) % kwTableSize
			}
			t[h] = kwEntry{upper: w, lower: strings.ToLower(w), reserved: reserved || t[h].reserved}
		}
	}
	add(otherKeywords, false)
	add(reservedWords, true)
	return t
}()

// kwTableSize is keywordTable's size: about three times its keywords.
const kwTableSize = 2048

// kwFoldHash hashes b as if its ASCII letters were all in one case.
func kwFoldHash(b []byte) uint16 {
	h := uint32(2166136261)
	for _, c := range b {
		h = (h ^ uint32(c|0x20)) * 16777619
	}
	return uint16(h^h>>16) % kwTableSize
}

// keyword returns the keyword b is, matched case-insensitively.
func keyword(b []byte) (e *kwEntry, ok bool) {
	if len(b) == 0 || len(b) > maxKeyword {
		return nil, false
	}
	for h := kwFoldHash(b); ; h = (h + 1) % kwTableSize {
		e := &keywordTable[h]
		if e.upper == "" {
			return nil, false
		}
		if eqFold(b, e.lower) {
			return e, true
		}
	}
}

// maxKeyword bounds the words lookupKeyword considers.
const maxKeyword = 32

// lookupKeyword upper-cases b into buf and reports whether it is a keyword
// and whether it is reserved. It does not allocate.
func lookupKeyword(b []byte, buf *[maxKeyword]byte) (upper []byte, isKeyword, reserved bool) {
	if len(b) > maxKeyword {
		return nil, false, false
	}
	for i, c := range b {
		if c >= 'a' && c <= 'z' {
			c -= 'a' - 'A'
		}
		buf[i] = c
	}
	upper = buf[:len(b)]
	e, ok := keyword(b)
	return upper, ok, ok && e.reserved
}
