package sqlscan

import (
	"bytes"
	"slices"
	"strings"
	"testing"
	"time"
)

const (
	assign = FeatUserVarAssign
	ref    = FeatUserVarRef
)

var scanTests = []struct {
	sql   string
	kind  Kind
	stmts int
	feat  Feature
}{
	// Empty texts.
	{"", KindOther, 0, 0},
	{"  \n\t ", KindOther, 0, 0},
	{"/* only a comment */", KindOther, 0, 0},
	{"-- x", KindOther, 0, 0},
	{"# x\n", KindOther, 0, 0},
	{";", KindOther, 0, 0},
	{" ; ;; ", KindOther, 0, 0},
	{"/*!*/;", KindOther, 0, 0},
	{"/*!40101 */", KindOther, 0, 0},

	// Kinds.
	{"SELECT 1", KindSelect, 1, 0},
	{"  select * from t where id = 1", KindSelect, 1, 0},
	{"(SELECT 1) UNION (SELECT 2)", KindSelect, 1, 0},
	{"((select 1))", KindSelect, 1, 0},
	{"/* c */ ( /* d */ SELECT 1)", KindSelect, 1, 0},
	{"WITH x AS (SELECT 1) SELECT * FROM x", KindSelect, 1, 0},
	{"WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n+1 FROM r WHERE n < 3) SELECT * FROM r", KindSelect, 1, 0},
	{"WITH x AS (SELECT 1) (SELECT * FROM x)", KindSelect, 1, 0},
	{"WITH x AS (SELECT id FROM t) UPDATE t JOIN x USING (id) SET t.a = 1", KindUpdate, 1, 0},
	{"WITH x AS (SELECT 1), y AS (SELECT 2) DELETE FROM t WHERE id IN (SELECT * FROM x)", KindDelete, 1, 0},
	{"VALUES ROW(1, 2)", KindSelect, 1, 0},
	{"TABLE t", KindSelect, 1, 0},
	{"INSERT INTO t VALUES (1)", KindInsert, 1, 0},
	{"insert into t set a = 1", KindInsert, 1, 0},
	{"UPDATE t SET a = 1, b = 2", KindUpdate, 1, 0},
	{"DELETE FROM t", KindDelete, 1, 0},
	{"REPLACE INTO t VALUES (1)", KindReplace, 1, 0},
	{"SET autocommit = 0", KindSet, 1, FeatSetSession},
	{"SET TRANSACTION READ ONLY", KindSetTransaction, 1, FeatSetTransaction},
	{"set transaction isolation level read committed, read write", KindSetTransaction, 1, FeatSetTransaction},
	{"SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED", KindSet, 1, FeatSetSession},
	{"SET LOCAL TRANSACTION READ WRITE", KindSet, 1, FeatSetSession},
	{"SET GLOBAL TRANSACTION ISOLATION LEVEL SERIALIZABLE", KindSet, 1, FeatSetGlobal},
	{"USE db", KindUse, 1, 0},
	{"use `my db`", KindUse, 1, 0},
	{"BEGIN", KindBegin, 1, 0},
	{"begin work;", KindBegin, 1, 0},
	{"START TRANSACTION READ ONLY", KindBegin, 1, 0},
	{"start transaction with consistent snapshot", KindBegin, 1, 0},
	{"START SLAVE", KindOther, 1, 0},
	{"BEGIN NOT ATOMIC SELECT 1; END", KindOther, 2, 0},
	{"COMMIT", KindCommit, 1, 0},
	{"commit and chain", KindCommit, 1, 0},
	{"ROLLBACK", KindRollback, 1, 0},
	{"ROLLBACK WORK", KindRollback, 1, 0},
	{"ROLLBACK TO SAVEPOINT s1", KindOther, 1, 0},
	{"rollback work to s1", KindOther, 1, 0},
	{"ROLLBACK TO s1", KindOther, 1, 0},
	{"KILL 5", KindKill, 1, FeatKill},
	{"SELECT 1; KILL 5", KindSelect, 2, FeatKill},
	{"LOAD DATA INFILE '/tmp/x' INTO TABLE t", KindLoadData, 1, 0},
	{"LOAD DATA INFILE 'local' INTO TABLE t", KindLoadData, 1, 0},
	{"LOAD DATA LOCAL INFILE 'x' INTO TABLE t", KindLoadDataLocal, 1, FeatLocalInfile},
	{"load data low_priority local infile 'x' into table t", KindLoadDataLocal, 1, FeatLocalInfile},
	{"LOAD DATA CONCURRENT LOCAL INFILE 'x' INTO TABLE t", KindLoadDataLocal, 1, FeatLocalInfile},
	{"LOAD XML LOCAL INFILE 'x' INTO TABLE t", KindLoadDataLocal, 1, FeatLocalInfile},
	{"LOAD XML INFILE 'x' INTO TABLE t", KindLoadData, 1, 0},
	{"LOAD INDEX INTO CACHE t", KindOther, 1, 0},
	{"CALL p()", KindCall, 1, 0},
	{"PREPARE s FROM 'SELECT ?'", KindPrepare, 1, FeatSQLPrepare},
	{"EXECUTE s", KindExecute, 1, 0},
	{"EXECUTE s USING @a, @b", KindExecute, 1, assign | ref},
	{"DEALLOCATE PREPARE s", KindDeallocate, 1, 0},
	{"DROP PREPARE s", KindDeallocate, 1, 0},
	{"DROP TABLE t", KindOther, 1, 0},
	{"LOCK TABLES t READ, u WRITE", KindLockTables, 1, FeatLockTables},
	{"lock table t write", KindLockTables, 1, FeatLockTables},
	{"FLUSH TABLES WITH READ LOCK", KindLockTables, 1, FeatLockTables},
	{"FLUSH TABLES t1, t2 WITH READ LOCK", KindLockTables, 1, FeatLockTables},
	{"FLUSH LOCAL TABLE t WITH READ LOCK", KindLockTables, 1, FeatLockTables},
	{"FLUSH NO_WRITE_TO_BINLOG TABLES t FOR EXPORT", KindLockTables, 1, FeatLockTables},
	{"FLUSH TABLES", KindOther, 1, 0},
	{"FLUSH TABLES t", KindOther, 1, 0},
	{"FLUSH PRIVILEGES", KindOther, 1, 0},
	{"LOCK INSTANCE FOR BACKUP", KindOther, 1, FeatLockTables},
	{"BACKUP LOCK t", KindOther, 1, FeatLockTables},
	{"UNLOCK TABLES", KindUnlockTables, 1, 0},
	{"unlock table", KindUnlockTables, 1, 0},
	{"UNLOCK INSTANCE", KindOther, 1, 0},
	{"SHOW VARIABLES LIKE 'x'", KindShow, 1, 0},
	{"XA START 'x'", KindXA, 1, FeatXA},
	{"xa begin 'x'", KindXA, 1, FeatXA},
	{"XA END 'x'", KindXA, 1, 0},
	{"XA COMMIT 'x'", KindXA, 1, 0},
	{"HANDLER t OPEN", KindHandler, 1, FeatHandler},
	{"HANDLER db.t OPEN AS h", KindHandler, 1, FeatHandler},
	{"handler `t` open", KindHandler, 1, FeatHandler},
	{"HANDLER t READ FIRST", KindHandler, 1, 0},
	{"HANDLER t CLOSE", KindHandler, 1, 0},
	{"DO GET_LOCK('a', 1)", KindDo, 1, FeatGetLock},
	{"DO 1", KindDo, 1, 0},
	{"EXPLAIN SELECT 1", KindOther, 1, 0},
	{"CREATE TABLE t (a int, temporary int)", KindOther, 1, 0},
	{"SETTINGS x", KindOther, 1, 0},
	{"--SELECT 1", KindOther, 1, 0},
	{"-- \nSELECT 1", KindSelect, 1, 0},
	{"--\tx\nSELECT 1", KindSelect, 1, 0},
	{"#SELECT\nUPDATE t SET a=1", KindUpdate, 1, 0},

	// Executable comments are code; other comments are not.
	{"/*!40101 SET @saved_cs_client = @@character_set_client */;", KindSet, 1, assign | ref},
	{"/*!40101 SET NAMES utf8mb4 */", KindSet, 1, FeatSetSession | FeatSetNames},
	{"/*!40014 SET @OLD_UNIQUE_CHECKS=@@UNIQUE_CHECKS, UNIQUE_CHECKS=0 */;", KindSet, 1, assign | ref | FeatSetSession},
	{"/*M!100100 SET @x=1 */", KindSet, 1, assign | ref},
	{"/*!SET @x=1*/", KindSet, 1, assign | ref},
	{"SELECT 1 /*!, @x */", KindSelect, 1, ref},
	{"CREATE /*!32311 TEMPORARY */ TABLE t (a int)", KindOther, 1, FeatTempTable},
	{"/* SET @x=1 */ SELECT 1", KindSelect, 1, 0},
	{"/*+ SET_VAR(x=1) */ SELECT 1", KindSelect, 1, 0},
	{"SELECT /*+ MAX_EXECUTION_TIME(1000) */ * FROM t", KindSelect, 1, 0},
	{"SELECT 1 -- @x := 1", KindSelect, 1, 0},
	{"SELECT 1 # ; SET @x := 1", KindSelect, 1, 0},
	{"SELECT 1 /* unterminated ; SET @x = 1", KindSelect, 1, 0},
	{"/*!40101 SELECT 1 /* inner */ , @x */", KindSelect, 1, ref},

	// User variables.
	{"SELECT '@x'", KindSelect, 1, 0},
	{`SELECT "@x := 1"`, KindSelect, 1, 0},
	{"SELECT `@x` FROM t", KindSelect, 1, 0},
	{"SELECT @@x", KindSelect, 1, 0},
	{"SELECT @@session.sql_mode, @@global.max_connections", KindSelect, 1, 0},
	{"SELECT @x", KindSelect, 1, ref},
	{"SELECT @`x y`, @'z', @\"w\"", KindSelect, 1, ref},
	{"SELECT 1 FROM t WHERE a=@x", KindSelect, 1, ref},
	{"SELECT @x = 1", KindSelect, 1, ref},
	{"SELECT 1 INTO @a", KindSelect, 1, assign | ref},
	{"SELECT a, b INTO @a, @b FROM t", KindSelect, 1, assign | ref},
	{"select a from t into @a for update", KindSelect, 1, assign | ref | FeatLocking},
	{"SELECT 1 INTO OUTFILE '/tmp/x'", KindSelect, 1, FeatSideEffect},
	{"SELECT a INTO DUMPFILE '/tmp/x' FROM t", KindSelect, 1, FeatSideEffect},
	{"SELECT NEXTVAL(s)", KindSelect, 1, FeatSideEffect},
	{"select setval(s, 100)", KindSelect, 1, FeatSideEffect},
	{"SELECT LASTVAL(s)", KindSelect, 1, FeatSideEffect},
	{"SELECT NEXT VALUE FOR s", KindSelect, 1, FeatSideEffect},
	{"SELECT previous value for s", KindSelect, 1, FeatSideEffect},
	{"SELECT next, nextval FROM t", KindSelect, 1, 0},
	{"INSERT INTO t VALUES (@x)", KindInsert, 1, ref},
	{"SELECT @a := 1", KindSelect, 1, assign | ref},
	{"SELECT a := 1", KindSelect, 1, assign},
	{"SELECT @a:=@a+1 FROM t", KindSelect, 1, assign | ref},
	{"SELECT @rownum:=0", KindSelect, 1, assign | ref},
	{"CALL p(@x)", KindCall, 1, assign | ref},
	{"CREATE USER 'u'@'localhost'", KindOther, 1, 0},
	{"GRANT ALL ON *.* TO `u`@`%`", KindOther, 1, 0},
	{"CREATE DEFINER=`root`@`localhost` PROCEDURE p() SELECT 1", KindOther, 1, 0},
	{"SELECT 'a' @x", KindSelect, 1, ref},

	// SET.
	{"SET @x = 1", KindSet, 1, assign | ref},
	{"SET @x := 1", KindSet, 1, assign | ref},
	{"set @`x` = 1", KindSet, 1, assign | ref},
	{"SET@x=1", KindSet, 1, assign | ref},
	{"SET autocommit=0, @a=1", KindSet, 1, FeatSetSession | assign | ref},
	{"SET a=1, @y:=2", KindSet, 1, FeatSetSession | assign | ref},
	{"SET @a = (SELECT 1), b = 2", KindSet, 1, FeatSetSession | assign | ref},
	{"SET x = IF(a, 1, 2), @y = 3", KindSet, 1, FeatSetSession | assign | ref},
	{"SET @a = IF(@b, 1, 2)", KindSet, 1, assign | ref},
	{"SET @@session.sql_mode=''", KindSet, 1, FeatSetSession},
	{"SET @@SESSION.sql_mode=''", KindSet, 1, FeatSetSession},
	{"SET @@sql_mode = 'x'", KindSet, 1, FeatSetSession},
	{"SET @@local.sql_mode = 'x'", KindSet, 1, FeatSetSession},
	{"SET @@global.max_connections = 1000", KindSet, 1, FeatSetGlobal},
	{"SET @@persist.max_connections = 1000", KindSet, 1, FeatSetGlobal},
	{"SET GLOBAL max_connections = 1000", KindSet, 1, FeatSetGlobal},
	{"SET PERSIST max_connections = 1000", KindSet, 1, FeatSetGlobal},
	{"SET PERSIST_ONLY max_connections = 1000", KindSet, 1, FeatSetGlobal},
	{"SET SESSION sql_mode = ''", KindSet, 1, FeatSetSession},
	{"SET LOCAL sql_mode = ''", KindSet, 1, FeatSetSession},
	{"SET `sql_mode` = ''", KindSet, 1, FeatSetSession},
	{"SET GLOBAL a = 1, b = 2", KindSet, 1, FeatSetGlobal},
	{"SET GLOBAL a = 1, SESSION b = 2", KindSet, 1, FeatSetGlobal | FeatSetSession},
	{"SET a = 1, GLOBAL b = 2", KindSet, 1, FeatSetGlobal | FeatSetSession},
	{"SET NAMES utf8mb4", KindSet, 1, FeatSetSession | FeatSetNames},
	{"SET NAMES 'utf8mb4' COLLATE 'utf8mb4_bin'", KindSet, 1, FeatSetSession | FeatSetNames},
	{"SET CHARACTER SET utf8", KindSet, 1, FeatSetSession},
	{"SET CHARSET utf8", KindSet, 1, FeatSetSession},
	{"SET NAMES utf8, @x = 1", KindSet, 1, FeatSetSession | FeatSetNames | assign | ref},
	{"SET time_zone = '+00:00'", KindSet, 1, FeatSetSession},
	{"SET sql_mode = CONCAT(@@sql_mode, ',STRICT_ALL_TABLES')", KindSet, 1, FeatSetSession},
	{"SET @@transaction_isolation = 'READ-COMMITTED'", KindSet, 1, FeatSetSession | FeatSetTransaction},
	{"SET @@tx_read_only = 1", KindSet, 1, FeatSetSession | FeatSetTransaction},
	{"SET @@session.tx_isolation = 'READ-COMMITTED'", KindSet, 1, FeatSetSession},
	{"SET tx_isolation = 'READ-COMMITTED'", KindSet, 1, FeatSetSession},
	{"SET PASSWORD = 'x'", KindSet, 1, 0},
	{"SET PASSWORD FOR 'u'@'h' = 'x'", KindSet, 1, 0},
	{"SET ROLE ALL", KindSet, 1, 0},
	{"SET DEFAULT ROLE r TO u", KindSet, 1, 0},
	{"SET RESOURCE GROUP g", KindSet, 1, 0},
	{"SET STATEMENT max_statement_time=60 FOR SELECT * FROM t", KindSelect, 1, FeatSetStatement},
	{"set statement sql_mode='', max_statement_time=1 for insert into t values (@x)", KindInsert, 1, FeatSetStatement | ref},
	{"SET STATEMENT x=(SELECT 1 FOR UPDATE) FOR UPDATE t SET a = 1", KindUpdate, 1, FeatSetStatement | FeatLocking},
	{"SET STATEMENT x=1 FOR UPDATE t SET a = 1", KindUpdate, 1, FeatSetStatement},
	{"SET STATEMENT x=1 FOR SET @y = 2", KindSet, 1, FeatSetStatement | assign | ref},
	{"SET STATEMENT x=1 FOR CREATE TEMPORARY TABLE t (a int)", KindOther, 1, FeatSetStatement | FeatTempTable},
	{"SET STATEMENT x=1", KindSet, 1, FeatSetStatement},
	{"UPDATE t SET a = 'SET @x=1'", KindUpdate, 1, 0},

	// Other features.
	{"CREATE TEMPORARY TABLE t (a int)", KindOther, 1, FeatTempTable},
	{"create or replace temporary table t (a int)", KindOther, 1, FeatTempTable},
	{"CREATE TEMPORARY TABLE IF NOT EXISTS t SELECT 1", KindOther, 1, FeatTempTable},
	{"CREATE TABLE temporary_x (a int)", KindOther, 1, 0},
	{"CREATE TABLE `temporary` (a int)", KindOther, 1, 0},
	{"SELECT GET_LOCK('a', 10)", KindSelect, 1, FeatGetLock},
	{"select get_lock ('a', 1)", KindSelect, 1, FeatGetLock},
	{"SELECT GET_LOCK /* c */ ('a', 1)", KindSelect, 1, FeatGetLock},
	{"SELECT my_get_lock('a')", KindSelect, 1, FeatFuncCall},
	{"SELECT x.get_lock('a')", KindSelect, 1, FeatFuncCall},
	{"SELECT get_lock FROM t", KindSelect, 1, 0},
	{"SELECT 'GET_LOCK(1)'", KindSelect, 1, 0},
	{"SELECT `get_lock`('a')", KindSelect, 1, FeatFuncCall},

	// Calls of functions that are not built in (possibly stored functions).
	{"SELECT ftz()", KindSelect, 1, FeatFuncCall},
	{"SELECT f (1)", KindSelect, 1, FeatFuncCall},
	{"SELECT db.f(1), `f2`(2)", KindSelect, 1, FeatFuncCall},
	{"SELECT `db`.`f`(1)", KindSelect, 1, FeatFuncCall},
	{"SELECT status()", KindSelect, 1, FeatFuncCall}, // a non-reserved keyword: the stored function runs
	{"SELECT 1 FROM t WHERE a = check_stock(b)", KindSelect, 1, FeatFuncCall},
	{"DO f()", KindDo, 1, FeatFuncCall},
	{"SET STATEMENT max_statement_time = 1 FOR SELECT f()", KindSelect, 1, FeatSetStatement | FeatFuncCall},
	{"SELECT COUNT(*), NOW(), date(d), time(t), if(a, b, c), left(s, 1), COALESCE(a, b) FROM t", KindSelect, 1, 0},
	{"SELECT CAST(x AS DATETIME(6)), CONVERT(y, CHAR(3)), CAST(z AS DECIMAL(10, 2))", KindSelect, 1, 0},
	{"SELECT ST_AsText(g), MBRContains(a, b), JSON_VALUE(j, '$.a')", KindSelect, 1, 0},
	{"SELECT a FROM t WHERE a IN (1, 2) AND EXISTS (SELECT 1) AND b = ANY (SELECT 2)", KindSelect, 1, 0},
	{"SELECT a FROM t JOIN u USING (id) WHERE MATCH (a) AGAINST ('x')", KindSelect, 1, 0},
	{"SELECT ROW_NUMBER() OVER (PARTITION BY a), x.y FROM t x", KindSelect, 1, 0},
	{"WITH c (a, b) AS (SELECT 1, 2), d (e) AS (SELECT 3) SELECT * FROM c, d", KindSelect, 1, 0},
	{"INSERT INTO t (a) VALUES (1)", KindInsert, 1, 0},
	{"INSERT INTO db.t (a) VALUES (f(1))", KindInsert, 1, FeatFuncCall},
	{"REPLACE t (a) VALUES (1)", KindReplace, 1, 0},
	{"CREATE TABLE t (a INT REFERENCES u (id))", KindOther, 1, 0},
	{"CREATE INDEX i ON t (a)", KindOther, 1, 0},
	{"SELECT 'f(1)', `x` FROM t /* g(2) */", KindSelect, 1, 0},

	// Locking reads.
	{"SELECT a FROM t WHERE k = 1 FOR UPDATE", KindSelect, 1, FeatLocking},
	{"SELECT a FROM t FOR UPDATE SKIP LOCKED", KindSelect, 1, FeatLocking},
	{"SELECT a FROM t FOR SHARE", KindSelect, 1, FeatLocking},
	{"SELECT a FROM t LOCK IN SHARE MODE", KindSelect, 1, FeatLocking},
	{"(SELECT id FROM u LIMIT 2 FOR UPDATE SKIP LOCKED) UNION ALL (SELECT id FROM v FOR UPDATE)", KindSelect, 1, FeatLocking},
	{"SELECT 'FOR UPDATE', `for` FROM t /* LOCK IN SHARE MODE */", KindSelect, 1, 0},
	{"SELECT a FROM t FOR SYSTEM_TIME AS OF NOW()", KindSelect, 1, 0},
	{"SELECT SQL_CALC_FOUND_ROWS * FROM t LIMIT 1", KindSelect, 1, FeatCalcFoundRows},
	{"SELECT FOUND_ROWS()", KindSelect, 1, FeatFoundRowsFunc},
	{"SELECT found_rows FROM t", KindSelect, 1, 0},
	{"SELECT LAST_INSERT_ID()", KindSelect, 1, FeatLastInsertID},
	{"INSERT INTO t VALUES (last_insert_id(5))", KindInsert, 1, FeatLastInsertID},
	{"SELECT @@identity + 1", KindSelect, 1, FeatLastInsertID},
	{"SELECT @@session.last_insert_id, @@IDENTITY", KindSelect, 1, FeatLastInsertID},
	{"SELECT @@identity_x, @@global.identity, '@@identity'", KindSelect, 1, 0},
	{"SELECT ROW_COUNT() > 0", KindSelect, 1, FeatRowCount},
	{"SELECT row_count FROM t", KindSelect, 1, 0},
	{"SELECT IS_FREE_LOCK('j')", KindSelect, 1, FeatLockInfo},
	{"select is_used_lock('j') IS NULL", KindSelect, 1, FeatLockInfo},
	{"SELECT is_free_lock FROM t", KindSelect, 1, 0},
	{"EXECUTE IMMEDIATE 'SELECT 1'", KindExecute, 1, FeatExecImmediate},
	{"execute immediate concat('SELECT ', 1)", KindExecute, 1, FeatExecImmediate},
	{"BEGIN NOT ATOMIC EXECUTE IMMEDIATE 'KILL 1'; END", KindOther, 2, FeatExecImmediate},
	{"SELECT 'EXECUTE IMMEDIATE ''KILL 1'''", KindSelect, 1, 0},

	// Several statements.
	{"SELECT 1; SELECT 2", KindSelect, 2, 0},
	{"SELECT 1;", KindSelect, 1, 0},
	{"SELECT 1;;", KindSelect, 1, 0},
	{"; SELECT 1", KindSelect, 1, 0},
	{"SELECT 1 -- ; SELECT 2", KindSelect, 1, 0},
	{"SELECT ';'", KindSelect, 1, 0},
	{"SELECT `a;b` FROM t", KindSelect, 1, 0},
	{"SELECT 1; SET @x=1", KindSelect, 2, assign | ref},
	{"INSERT INTO t VALUES (1); SELECT LAST_INSERT_ID()", KindInsert, 2, FeatLastInsertID},
	{"SET autocommit=0; BEGIN; UPDATE t SET a=1; COMMIT", KindSet, 4, FeatSetSession},
	{"BEGIN NOT ATOMIC SET @x = 1; END", KindOther, 2, assign | ref},
	{"BEGIN NOT ATOMIC CREATE TEMPORARY TABLE t (a int); END", KindOther, 2, FeatTempTable},
	{"IF @a THEN SET autocommit=0; END IF", KindOther, 2, ref | FeatSetSession},
	{"WHILE 1 DO LOCK TABLES t READ; END WHILE", KindOther, 2, FeatLockTables},
	{"SELECT CASE WHEN a THEN b ELSE c END FROM t", KindSelect, 1, 0},

	// Unterminated literals run to the end of input.
	{"SELECT 'unterminated ; SELECT 2", KindSelect, 1, 0},
	{"SELECT \"a\\\"; SET @x=1\"", KindSelect, 1, 0},
	{"SELECT 'a\\'; SET @x=1", KindSelect, 1, 0},
	{"SELECT 'it''s'; SET @x=1", KindSelect, 2, assign | ref},
	{"SELECT `a``; SET @x=1`", KindSelect, 1, 0},
	{"SELECT `unterminated; SET @x=1", KindSelect, 1, 0},
}

func TestScan(t *testing.T) {
	for _, tt := range scanTests {
		got := Scan([]byte(tt.sql))
		if got.Kind != tt.kind || got.Statements != tt.stmts || got.Features != tt.feat {
			t.Errorf("Scan(%q) = kind %v, %d statements, features %v; want %v, %d, %v",
				tt.sql, got.Kind, got.Statements, got.Features, tt.kind, tt.stmts, tt.feat)
		}
	}
}

func TestScanMode(t *testing.T) {
	tests := []struct {
		mode  Mode
		sql   string
		stmts int
		feat  Feature
	}{
		{0, `SELECT 'a\'; SET @x=1`, 1, 0},
		{NoBackslashEscapes, `SELECT 'a\'; SET @x=1`, 2, assign | ref},
		{NoBackslashEscapes, `SELECT 'a''; SET @x=1'`, 1, 0},
		{0, `SELECT "@x"`, 1, 0},
		{ANSIQuotes, `SELECT "@x"`, 1, 0},
		{ANSIQuotes, `SELECT "a\"; SET @x = 1 -- "`, 2, assign | ref},
		{0, `SELECT "a\"; SET @x = 1 -- "`, 1, 0},
		{ANSIQuotes, `SELECT @"x"`, 1, ref},
	}
	for _, tt := range tests {
		got := tt.mode.Scan([]byte(tt.sql))
		if got.Statements != tt.stmts || got.Features != tt.feat {
			t.Errorf("Mode(%d).Scan(%q) = %d statements, features %v; want %d, %v",
				tt.mode, tt.sql, got.Statements, got.Features, tt.stmts, tt.feat)
		}
	}
}

func TestScanKill(t *testing.T) {
	tests := []struct {
		sql  string
		want Kill
	}{
		{"KILL 5", Kill{ID: 5, OK: true}},
		{"kill query 7;", Kill{Query: true, ID: 7, OK: true}},
		{"KILL CONNECTION 9", Kill{ID: 9, OK: true}},
		{"KILL HARD QUERY 3", Kill{Query: true, ID: 3, OK: true}},
		{"KILL SOFT CONNECTION 3 ; -- bye", Kill{ID: 3, OK: true}},
		{"/* c */ KILL /* d */ 42 /* e */", Kill{ID: 42, OK: true}},
		{"KILL 18446744073709551615", Kill{ID: 18446744073709551615, OK: true}},
		{"KILL 18446744073709551616", Kill{}},
		{"KILL 99999999999999999999", Kill{}},
		{"KILL QUERY ID 3", Kill{Query: true, QueryID: true, ID: 3, OK: true}},
		{"KILL USER bob", Kill{User: "bob", OK: true}},
		{"KILL HARD QUERY USER 'bob'@'10.%';", Kill{Query: true, User: "bob", OK: true}},
		{"KILL CONNECTION USER `b``ob`@`h`", Kill{User: "b`ob", OK: true}},
		{"KILL USER bob@localhost", Kill{User: "bob", OK: true}},
		{"KILL USER", Kill{}},
		{"KILL USER bob; SELECT 1", Kill{User: "bob"}},
		{"KILL ?", Kill{}},
		{"KILL 1; SELECT 1", Kill{ID: 1}},
		{"KILL 1;;", Kill{ID: 1}},
		{"KILL 1 2", Kill{ID: 1}},
		{"KILL 0x10", Kill{}},
		{"KILL 1.5", Kill{}},
		{"KILL -1", Kill{}},
		{"KILL CONNECTION_ID()", Kill{}},
		{"KILL @x", Kill{}},
		{"KILL 5 /* unterminated", Kill{ID: 5}},
		{"(KILL 5)", Kill{ID: 5}},
		{"SET STATEMENT a=1 FOR KILL 5", Kill{ID: 5}},
		{"SELECT 1; KILL 5", Kill{}},
	}
	for _, tt := range tests {
		got := Scan([]byte(tt.sql))
		if got.Kill != tt.want {
			t.Errorf("Scan(%q).Kill = %+v, want %+v", tt.sql, got.Kill, tt.want)
		}
		if got.Kill.OK && got.Kind != KindKill {
			t.Errorf("Scan(%q).Kind = %v with Kill.OK", tt.sql, got.Kind)
		}
	}
}

func TestScanLastInsertID(t *testing.T) {
	tests := []struct{ sql, want string }{
		{"SELECT LAST_INSERT_ID()", "LAST_INSERT_ID()"},
		{"select last_insert_id()", "last_insert_id()"},
		{"SELECT Last_Insert_Id()", "Last_Insert_Id()"},
		{"SELECT LAST_INSERT_ID();", "LAST_INSERT_ID()"},
		{"  SELECT LAST_INSERT_ID( ) ; -- x", "LAST_INSERT_ID( )"},
		{"/* c */ SELECT /* d */ LAST_INSERT_ID() /* e */", "LAST_INSERT_ID()"},
		{"SELECT LAST_INSERT_ID() AS id", "id"},
		{"SELECT LAST_INSERT_ID() id;", "id"},
		{"SELECT LAST_INSERT_ID() as status", "status"},
		{"SELECT LAST_INSERT_ID() AS `my id`", "my id"},
		{"SELECT LAST_INSERT_ID() AS `a``b`", "a`b"},
		{"SELECT LAST_INSERT_ID() `x`", "x"},
		{"SELECT LAST_INSERT_ID() AS 'x'", "x"},
		{`SELECT LAST_INSERT_ID() AS "x"`, "x"},
		{`SELECT LAST_INSERT_ID() AS 'it''s'`, "it's"},
		{"SELECT LAST_INSERT_ID() 'x'", "x"},
		{"SELECT LAST_INSERT_ID(), 1", ""},
		{"SELECT LAST_INSERT_ID(5)", ""},
		{"SELECT LAST_INSERT_ID() FROM dual", ""},
		{"SELECT LAST_INSERT_ID(); SELECT 1", ""},
		{"SELECT LAST_INSERT_ID();;", ""},
		{"(SELECT LAST_INSERT_ID())", ""},
		{"SELECT LAST_INSERT_ID() AS", ""},
		{"SELECT LAST_INSERT_ID() AS FROM", ""},
		{"SELECT LAST_INSERT_ID() AS ''", ""},
		{"SELECT LAST_INSERT_ID() AS 'x", ""},
		{"SELECT LAST_INSERT_ID() /* unterminated", ""},
		{"SELECT LAST_INSERT_ID() + 1", ""},
		{"SELECT x.LAST_INSERT_ID()", ""},
		{"SELECT SQL_NO_CACHE LAST_INSERT_ID()", ""},
		{"SELECT @@identity", "@@identity"},
		{"SELECT @@IDENTITY AS id", "id"},
		{"select @@Last_Insert_Id;", "@@Last_Insert_Id"},
		{"SELECT @@session.identity", "@@session.identity"},
		{"SELECT @@LOCAL.last_insert_id", "@@LOCAL.last_insert_id"},
		{"SELECT @@global.identity", ""},
		{"SELECT @@identity + 1", ""},
		{"SELECT @@identity, 1", ""},
		{"SELECT @@identities", ""},
	}
	for _, tt := range tests {
		got := Scan([]byte(tt.sql))
		if got.LastInsertIDColumn != tt.want {
			t.Errorf("Scan(%q).LastInsertIDColumn = %q, want %q", tt.sql, got.LastInsertIDColumn, tt.want)
		}
		if isVar := strings.Contains(tt.sql, "@@") && tt.want != ""; got.LastInsertIDVar != isVar {
			t.Errorf("Scan(%q).LastInsertIDVar = %v", tt.sql, got.LastInsertIDVar)
		}
	}
}

func TestScanRowCount(t *testing.T) {
	tests := []struct{ sql, want string }{
		{"SELECT ROW_COUNT()", "ROW_COUNT()"},
		{"select row_count();", "row_count()"},
		{"SELECT Row_Count() AS n", "n"},
		{"SELECT ROW_COUNT() + 1", ""},
		{"SELECT ROW_COUNT(), 1", ""},
		{"SELECT ROW_COUNT(); SELECT 1", ""},
		{"SELECT db.ROW_COUNT()", ""},
	}
	for _, tt := range tests {
		got := Scan([]byte(tt.sql))
		if got.RowCountColumn != tt.want {
			t.Errorf("Scan(%q).RowCountColumn = %q, want %q", tt.sql, got.RowCountColumn, tt.want)
		}
		if tt.want != "" && (got.Features != FeatRowCount || got.LastInsertIDColumn != "") {
			t.Errorf("Scan(%q) = %+v", tt.sql, got)
		}
	}
}

func TestKindString(t *testing.T) {
	seen := map[string]bool{}
	for k := KindOther; k < numKinds; k++ {
		s := k.String()
		if s == "" || seen[s] {
			t.Errorf("Kind(%d).String() = %q: empty or duplicate", k, s)
		}
		seen[s] = true
	}
	if got := Kind(200).String(); got != "Kind(200)" {
		t.Errorf("Kind(200).String() = %q", got)
	}
	if got := (FeatUserVarRef | FeatGetLock).String(); got != "user_var_ref|get_lock" {
		t.Errorf("Feature.String() = %q", got)
	}
	if got := Feature(0).String(); got != "none" {
		t.Errorf("Feature(0).String() = %q", got)
	}
	if got := FeatSetStatement.String(); got != "set_statement" {
		t.Errorf("FeatSetStatement.String() = %q", got)
	}
}

// typical are statements a proxy sees all day; Scan must not allocate on them.
var typical = []string{
	"SELECT id, name, price FROM products WHERE shop_id = 42 AND id = 1001 /* conn_tag:checkout */",
	"SELECT LAST_INSERT_ID()",
	"select last_insert_id()",
	"INSERT INTO t (a, b) VALUES (1, 'x'), (2, 'y')",
	"UPDATE t SET a = a + 1 WHERE id = ?",
	"SET NAMES utf8mb4 COLLATE utf8mb4_unicode_ci",
	"SET @@session.sql_mode = 'STRICT_ALL_TABLES', autocommit = 1, @x := 5",
	"SET STATEMENT max_statement_time=1 FOR SELECT 1",
	"KILL QUERY 12345",
	"START TRANSACTION",
	"COMMIT",
	"/*!40101 SET @saved_cs_client = @@character_set_client */;",
	"WITH x AS (SELECT 1) SELECT * FROM x",
	"FLUSH TABLES t WITH READ LOCK",
	"SELECT GET_LOCK('k', 10), FOUND_ROWS(), @a := 1 INTO @b",
	"CALL holdfast.reserve(1, 'key-1', '[{\"item\":1}]', 600)",
}

func TestScanDoesNotAllocate(t *testing.T) {
	for _, sql := range typical {
		b := []byte(sql)
		if n := testing.AllocsPerRun(100, func() { Scan(b) }); n != 0 {
			t.Errorf("Scan(%q) allocates %v times", sql, n)
		}
	}
}

func TestDoesNotModifyInput(t *testing.T) {
	inputs := append([]string{}, typical...)
	for _, tt := range scanTests {
		inputs = append(inputs, tt.sql)
	}
	for _, sql := range inputs {
		b := []byte(sql)
		Scan(b)
		NoBackslashEscapes.Scan(b)
		ANSIQuotes.Scan(b)
		AppendDigest(nil, b, 0)
		AppendDigest(nil, b, 7)
		ParseCall(b)
		if string(b) != sql {
			t.Fatalf("input modified: %q became %q", sql, b)
		}
	}
}

func TestScanHostile(t *testing.T) {
	big := 1 << 20
	inputs := [][]byte{
		append([]byte("SELECT /*"), bytes.Repeat([]byte("x"), big)...),
		append([]byte("SELECT '"), bytes.Repeat([]byte("\\'"), big/2)...),
		append([]byte("SELECT `"), bytes.Repeat([]byte("``"), big/2)...),
		bytes.Repeat([]byte("("), big),
		bytes.Repeat([]byte(")"), big),
		bytes.Repeat([]byte("THEN "), big/5),
		bytes.Repeat([]byte("SET STATEMENT x=1 FOR "), big/22),
		bytes.Repeat([]byte{0}, big),
		bytes.Repeat([]byte{0xff, 0xfe, 0x80}, big/3),
		bytes.Repeat([]byte("a"), big),
		bytes.Repeat([]byte("/*!"), big/3),
		bytes.Repeat([]byte("@"), big),
		[]byte(strings.Repeat("SELECT 1;", big/9)),
		[]byte(strings.Repeat("x IN (1, ", big/9)),
		[]byte("VALUES " + strings.Repeat("(1), (", big/6)),
		[]byte(strings.Repeat("IN ((1, 2), (", big/13)),
		[]byte("SELECT LAST_INSERT_ID() AS " + strings.Repeat("/**/", big/4)),
		[]byte("KILL " + strings.Repeat("9", big)),
	}
	for i, in := range inputs {
		start := time.Now()
		Scan(in)
		AppendDigest(make([]byte, 0, 256), in, 256)
		AppendDigest(nil, in, 0)
		ParseCall(in)
		t.Logf("input %d (%d bytes): %v", i, len(in), time.Since(start))
	}
}

func TestLookupKW(t *testing.T) {
	for k, name := range kwWords {
		if k == int(kwNone) {
			continue
		}
		if name == "" {
			t.Errorf("kw %d has no word", k)
			continue
		}
		for _, s := range []string{name, strings.ToUpper(name), strings.ToUpper(name[:1]) + name[1:]} {
			if got := lookupKW([]byte(s)); got != kw(k) {
				t.Errorf("lookupKW(%q) = %d, want %d", s, got, k)
			}
		}
	}
	for _, s := range []string{"", "a", "selects", "sel", "settings", "my_get_lock", "get_lock_", "\xff\xfe", "set\x00"} {
		if got := lookupKW([]byte(s)); got != kwNone {
			t.Errorf("lookupKW(%q) = %d, want none", s, got)
		}
	}
}

// TestNothingInsideLiteralsOrComments quotes or comments out every scan test
// statement: no feature, keyword or separator may leak out.
func TestNothingInsideLiteralsOrComments(t *testing.T) {
	quote := strings.NewReplacer(`\`, `\\`, `'`, `''`)
	ident := strings.NewReplacer("`", "``")
	for _, tt := range scanTests {
		for _, sql := range []string{
			"SELECT '" + quote.Replace(tt.sql) + "'",
			"SELECT 1 AS `" + ident.Replace(tt.sql) + "`",
			"/* " + strings.ReplaceAll(tt.sql, "*/", "* /") + " */ SELECT 1",
			"SELECT 1 -- " + strings.ReplaceAll(tt.sql, "\n", " "),
		} {
			got := Scan([]byte(sql))
			if got.Kind != KindSelect || got.Statements != 1 || got.Features != 0 {
				t.Errorf("Scan(%q) = %v, %d statements, features %v; want select, 1, none",
					sql, got.Kind, got.Statements, got.Features)
			}
		}
	}
}

func TestScanTagCommentsVarsPlainCall(t *testing.T) {
	body := func(sql string, info Info) []string {
		var out []string
		for _, sp := range info.TagComments[:info.NTagComments] {
			out = append(out, sql[sp.Start:sp.End])
		}
		return out
	}
	for _, tc := range []struct {
		mode Mode
		sql  string
		tags []string
	}{
		{0, "SELECT 1 /* conn_tag:x */", []string{" conn_tag:x "}},
		{0, "/* a */ SELECT '/* conn_tag:evil */' -- conn_tag:y\n# conn_tag:z", []string{" conn_tag:y", " conn_tag:z"}},
		{0, "SELECT 1 /*! conn_tag:x */ /*M!100100 /* conn_tag:y */ */", nil},
		{0, "SELECT 1 /* conn_tag:x", nil},
		{NoBackslashEscapes, `SELECT 'x\', '/* conn_tag:evil */' /* conn_tag:real */`, []string{" conn_tag:real "}},
		{0, `SELECT 'x\', '/* conn_tag:evil */' /* conn_tag:real */`, []string{" conn_tag:evil "}},
		{ANSIQuotes, `SELECT "/* conn_tag:evil */" /* conn_tag:real */`, []string{" conn_tag:real "}},
	} {
		info := tc.mode.Scan([]byte(tc.sql))
		if got := body(tc.sql, info); !slices.Equal(got, tc.tags) {
			t.Errorf("mode %d: Scan(%q) tag comments %q, want %q", tc.mode, tc.sql, got, tc.tags)
		}
	}

	for sql, want := range map[string]VarKind{
		"SELECT @@wait_timeout":                                      VarTimeouts,
		"SELECT @@session.interactive_timeout, @@GLOBAL.x":           VarTimeouts,
		"SELECT @@session_track_system_variables":                    VarTracking,
		"SHOW SESSION VARIABLES LIKE 'x'":                            VarLists,
		"SELECT * FROM information_schema.SESSION_VARIABLES":         VarLists,
		"SET wait_timeout = 5":                                       VarTimeouts,
		"SET SESSION `session_track_state_change` = ON":              VarTracking,
		"SELECT '@@wait_timeout', `variables` FROM t -- @@x_timeout": 0,
		"SELECT @@time_zone, wait_timeout FROM t":                    0,
	} {
		if got := Scan([]byte(sql)).Vars; got != want {
			t.Errorf("Scan(%q).Vars = %b, want %b", sql, got, want)
		}
	}

	for sql, want := range map[string]bool{
		"BEGIN": true, "begin work;": true, "/* conn_tag:x */ START TRANSACTION": true, "COMMIT": true,
		"ROLLBACK WORK ;": true, "BEGIN; SELECT 1": false, "START TRANSACTION READ ONLY": false,
		"COMMIT AND CHAIN": false, "ROLLBACK TO s": false, "BEGIN NOT ATOMIC SELECT 1; END": false, "SELECT 1": false,
		"BEGIN /* unterminated": false,
	} {
		if got := Scan([]byte(sql)).Plain; got != want {
			t.Errorf("Scan(%q).Plain = %v, want %v", sql, got, want)
		}
	}

	for sql, want := range map[string][2]string{
		"CALL holdfast.reserve(1)":          {"holdfast", "reserve"},
		"call `HoldFast`.`claim`('x')":      {"HoldFast", "claim"},
		"/* conn_tag:a */ CALL p()":         {"", "p"},
		"CALL db . p":                       {"db", "p"},
		"SELECT 1; CALL holdfast.reserve()": {"", ""},
	} {
		info := Scan([]byte(sql))
		got := [2]string{sql[info.CallSchema.Start:info.CallSchema.End], sql[info.CallName.Start:info.CallName.End]}
		if got != want {
			t.Errorf("Scan(%q) calls %q, want %q", sql, got, want)
		}
	}
}

func TestPrimaryHint(t *testing.T) {
	for sql, want := range map[string]bool{
		"/* holdfast:primary */ SELECT 1":                    true,
		"SELECT 1 -- holdfast:primary":                       true,
		"SELECT 1 /* conn_tag:x holdfast:primary */":         true,
		"SELECT '/* holdfast:primary */'":                    false,
		"SELECT 1 /*!99999 holdfast:primary */":              false,
		"SELECT 1 /* holdfast:replica */":                    false,
		"/* conn_tag:checkout */ SELECT holdfast_col FROM t": false,
	} {
		if got := Scan([]byte(sql)).PrimaryHint; got != want {
			t.Errorf("Scan(%q).PrimaryHint = %v, want %v", sql, got, want)
		}
	}
}
