package sqlscan

import (
	"bytes"
	"strings"
)

// Protected is a set of tables, all in one schema, that client statements
// may read but never write, lock or alter. Scan finds, at the cost of one
// test per word, the texts that name one of them (Info.NamesProtected),
// and Mode.CheckProtected decides for those.
//
// Names are compared without regard to ASCII letter case, whatever the
// server's lower_case_table_names says: MariaDB on Linux (0) tells
// holdfast_controls and HOLDFAST_CONTROLS apart, but a client has no
// business writing a table of holdfast's schema that differs from one of
// holdfast's only in case either, and refusing both cannot be fooled by
// the setting. The schema is compared the same way.
//
// A nil *Protected protects nothing. A Protected is immutable and safe for
// concurrent use.
type Protected struct {
	schema string   // lower case (ASCII)
	tables []string // lower case (ASCII), distinct
	// first[n] has bit c&31 set for the first byte c of each table name n
	// bytes long, so that one test rejects most words.
	first [maxNameLen + 1]uint32
}

// maxNameLen bounds the names a Protected holds: MySQL's 64 characters of
// up to four bytes each.
const maxNameLen = 256

// NewProtected returns the set of tables in schema. Empty names and names
// longer than 256 bytes are left out; with no schema or no table left it
// returns nil, which protects nothing.
func NewProtected(schema string, tables []string) *Protected {
	if schema == "" {
		return nil
	}
	p := &Protected{schema: lowerASCII(schema)}
	seen := map[string]bool{}
	for _, t := range tables {
		t = lowerASCII(t)
		if t == "" || len(t) > maxNameLen || seen[t] {
			continue
		}
		seen[t] = true
		p.tables = append(p.tables, t)
		p.first[len(t)] |= 1 << (t[0] & 31)
	}
	if len(p.tables) == 0 {
		return nil
	}
	return p
}

// Schema returns the schema of the tables, in lower case.
func (p *Protected) Schema() string { return p.schema }

// Tables returns the tables, in lower case.
func (p *Protected) Tables() []string { return append([]string(nil), p.tables...) }

// lowerASCII lowers the ASCII letters of s.
func lowerASCII(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c >= 'A' && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// names reports whether token t of src, a word or a quoted identifier, is
// one of the tables' names. It does not allocate.
func (p *Protected) names(src []byte, t token) bool {
	b := src[t.start:t.end]
	if t.kind == tQuoted {
		if t.open() || len(b) < 2 {
			return false
		}
		b = b[1 : len(b)-1]
	}
	return p.table(b) != ""
}

// table returns the table name b is (as p spells it), or "".
func (p *Protected) table(b []byte) string {
	if len(b) == 0 || len(b) > maxNameLen || p.first[len(b)]&(1<<(b[0]&31)) == 0 {
		return ""
	}
	for _, n := range p.tables {
		if eqFold(b, n) {
			return n
		}
	}
	return ""
}

// inSchema reports whether the schema named b is p's.
func (p *Protected) inSchema(b []byte) bool { return eqFold(b, p.schema) }

// Refusal is why Mode.CheckProtected refuses a text.
type Refusal struct {
	// Schema and Table name the protected table, as Protected spells
	// them; Table is empty when the statement drops the schema itself.
	Schema, Table string
	// Unsure is set when the statement names the table where holdfast
	// cannot tell whether it only reads it, and is refused to be safe;
	// Where then says what holdfast could not see into.
	Unsure bool
	Where  string
	// Dynamic is set when the statement is the text of an EXECUTE
	// IMMEDIATE or a PREPARE ... FROM.
	Dynamic bool
}

// Why Refusal.Unsure.
const (
	whereCompound = "a compound statement, or a statement inside one"
	whereProgram  = "the definition of a stored routine, trigger or event"
	whereSetStmt  = "SET STATEMENT ... FOR"
	whereBackup   = "BACKUP LOCK"
	whereExpr     = "a statement built by an expression (EXECUTE IMMEDIATE or PREPARE ... FROM)"
	whereDeep     = "EXECUTE IMMEDIATE or PREPARE text nested too deep"
)

// maxDynamicDepth bounds the nesting of EXECUTE IMMEDIATE / PREPARE text
// CheckProtected reads.
const maxDynamicDepth = 4

// CheckProtected reports whether sql, lexed under m, holds a statement
// that writes, locks or alters one of p's tables, and which. db is the
// session's current database, against which unqualified names resolve; a
// USE statement in the text changes it for the statements after it. It
// is the slow path, for the texts Scan marks (Info.NamesProtected,
// FeatExecImmediate, FeatSQLPrepare); it allocates.
//
// A table counts where a statement names tables (after FROM, JOIN, INTO,
// UPDATE, TABLE, USING, ... and in lists of them), qualified by p's schema
// or unqualified while db is p's schema, and anywhere when qualified by
// p's schema. Refused:
//
//   - a statement that is not a plain read and names the table: INSERT,
//     REPLACE, UPDATE, DELETE (also when the table is only read, as in
//     INSERT ... SELECT, a join or a subquery: InnoDB locks the rows such
//     reads see), TRUNCATE, LOAD DATA, LOCK TABLES, HANDLER, every DDL
//     (ALTER, DROP, RENAME, CREATE ... LIKE, CREATE VIEW, REFERENCES,
//     GRANT, ...), table maintenance (OPTIMIZE, ANALYZE, CHECK, REPAIR,
//     FLUSH TABLES);
//   - a read that locks (FOR UPDATE, FOR SHARE, LOCK IN SHARE MODE);
//   - DROP DATABASE / DROP SCHEMA of p's schema;
//   - EXECUTE IMMEDIATE or PREPARE ... FROM of a literal whose text would
//     be refused itself;
//   - conservatively (Refusal.Unsure), a statement in which the table's
//     name appears anywhere where holdfast cannot tell what it does with
//     it: a statement that begins a compound statement or a part of one
//     (BEGIN NOT ATOMIC, IF, ELSE, a label, DECLARE ... HANDLER, ...; the
//     text is cut at every ';', so the statements of a body are judged
//     each on its own), the definition of a stored routine, trigger or
//     event, SET STATEMENT ... FOR, BACKUP LOCK; and EXECUTE IMMEDIATE or
//     PREPARE ... FROM of an expression whose literal parts, joined, read
//     as a statement that would be refused.
//
// Plain reads pass: SELECT (also SELECT ... INTO), TABLE, VALUES, WITH ...
// SELECT, SHOW, DESCRIBE, EXPLAIN of a read, HELP, CHECKSUM TABLE, and SET,
// DO and CALL whose expressions read. A column, alias or other name that
// is spelt like a protected table but stands elsewhere than a table's
// place passes. What the text does not show (the statement a variable or
// a function builds, views, stored routines, triggers and events already
// defined) is not seen.
func (m Mode) CheckProtected(sql []byte, p *Protected, db string) (Refusal, bool) {
	if p == nil {
		return Refusal{}, false
	}
	c := protCheck{m: m, p: p, db: db}
	c.text(sql)
	return c.r, c.found
}

// protCheck is the state of one CheckProtected.
type protCheck struct {
	m     Mode
	p     *Protected
	db    string
	level int // nesting of EXECUTE IMMEDIATE / PREPARE text
	r     Refusal
	found bool
}

func (c *protCheck) refuse(r Refusal) {
	if !c.found {
		r.Schema = c.p.schema
		c.r, c.found = r, true
	}
}

// dbProtected reports whether unqualified names resolve in p's schema.
func (c *protCheck) dbProtected() bool { return eqFold([]byte(c.db), c.p.schema) }

// text checks the statements of sql.
func (c *protCheck) text(sql []byte) {
	lx := lexer{src: sql, mode: c.m}
	g := protStmt{}
	for !c.found {
		t := lx.next()
		if t.kind == tEOF || t.is(';') {
			c.endStmt(&g)
			if t.kind == tEOF {
				break
			}
			g = protStmt{}
			continue
		}
		c.step(&g, &lx, t)
	}
}

// dynamic checks the statement text of an EXECUTE IMMEDIATE or PREPARE,
// which resolves its names where it runs.
func (c *protCheck) dynamic(d Dynamic) {
	if c.level >= maxDynamicDepth {
		if t := c.mentioned(append(append([]byte(nil), d.Text...), bytes.Join(d.Parts, nil)...)); t != "" {
			c.refuse(Refusal{Table: t, Unsure: true, Where: whereDeep, Dynamic: true})
		}
		return
	}
	texts := [][]byte{d.Text}
	if !d.Literal {
		// An expression: its literal parts, joined as they are and with
		// spaces (where values come between them), read as statements.
		texts = [][]byte{bytes.Join(d.Parts, nil), bytes.Join(d.Parts, []byte(" "))}
	}
	for _, text := range texts {
		inner := protCheck{m: c.m, p: c.p, db: c.db, level: c.level + 1}
		inner.text(text)
		if inner.found {
			r := inner.r
			r.Dynamic = true
			if !d.Literal {
				r.Unsure, r.Where = true, whereExpr
			}
			c.refuse(r)
			return
		}
	}
}

// mentioned returns the first table whose name b holds, in any letter
// case, anywhere; "" when none.
func (c *protCheck) mentioned(b []byte) string {
	low := strings.ToLower(string(b))
	for _, t := range c.p.tables {
		if strings.Contains(low, t) {
			return t
		}
	}
	return ""
}

// protStmt is the state of one statement of a CheckProtected.
type protStmt struct {
	started bool
	class   protClass
	where   string // with classUnsure: what holdfast cannot see into
	// explain: the statement an EXPLAIN, DESCRIBE or ANALYZE is about has
	// not been found yet; with: the statement a WITH clause introduces.
	explain, with bool
	ddl           bool // ON and LIKE name a table (CREATE, ALTER, DROP, GRANT, REVOKE)
	renames       bool // TO and RENAME name a table (RENAME, ALTER)
	locking       bool
	depth         int
	// pending: the next name is a table's; noParen: ... but not inside a
	// '(' that follows (USING (columns)).
	pending, noParen bool
	// lists has bit d set while a ',' at depth d is followed by a table
	// (FROM a, b; UPDATE a, b; LOCK TABLES a READ, b WRITE; ...);
	// fromCalls has bit d set inside a call of a function whose FROM is
	// no table's (EXTRACT, TRIM, SUBSTRING). Depths past 63 share bit 63.
	lists, fromCalls uint64
	prev, prev2      token // the previous two tokens
	prevW            pw    // prev's word, pwNone when it is not one
	// ref is the first protected table named in a table's place, or
	// qualified by the protected schema anywhere; any the first anywhere
	// (unqualified names outside a table's place count when the current
	// database is the protected schema).
	ref, any       string
	hasRef, hasAny bool
	use            []byte // USE's database
	dropSchema     bool   // the next name is a database DROP DATABASE drops
}

type protClass uint8

const (
	classWrite  protClass = iota // not a plain read: naming a protected table refuses it
	classRead                    // a plain read, unless it locks
	classUnsure                  // holdfast cannot tell: any mention refuses it
	classUse                     // USE db
)

func bitAt(depth int) uint64 { return 1 << min(max(depth, 0), 63) }

func (c *protCheck) endStmt(g *protStmt) {
	if !g.started {
		return
	}
	switch g.class {
	case classUse:
		if g.use != nil {
			c.db = string(g.use)
		}
	case classUnsure:
		if g.hasAny {
			c.refuse(Refusal{Table: g.any, Unsure: true, Where: g.where})
		}
	case classRead:
		if g.locking && g.hasRef {
			c.refuse(Refusal{Table: g.ref})
		}
	default:
		if g.hasRef {
			c.refuse(Refusal{Table: g.ref})
		}
	}
}

func (g *protStmt) noteRef(name string) {
	if !g.hasRef {
		g.ref, g.hasRef = name, true
	}
	g.noteAny(name)
}

func (g *protStmt) noteAny(name string) {
	if !g.hasAny {
		g.any, g.hasAny = name, true
	}
}

// step handles token t of statement g; lx is just after t.
func (c *protCheck) step(g *protStmt, lx *lexer, t token) {
	src := lx.src
	w := pwNone
	qualified := g.prev.is('.')
	if t.kind == tWord && !qualified {
		w = lookupPW(src[t.start:t.end])
	}
	prev2, prevW := g.prev2, g.prevW // prev2: the token before the '.' when qualified
	g.prev2, g.prev, g.prevW = g.prev, t, w
	if t.kind == tWord && w == pwNone && !qualified {
		if d, ok := c.m.dynamicAt(t, *lx); ok {
			c.dynamic(d)
		}
	}
	if !g.started {
		g.started = true
		c.head(g, *lx, t, w)
		return
	}
	if g.class == classUse && g.use == nil && (t.kind == tWord || t.kind == tQuoted) {
		g.use = identName(src, t)
		return
	}
	if w == pwDrop && peekPW(*lx) == pwDatabase {
		g.dropSchema = true // inside a compound statement or a routine
	}
	if g.dropSchema {
		if t.kind == tWord || t.kind == tQuoted {
			switch w {
			case pwDrop, pwDatabase, pwIf, pwExists:
				return
			}
			if c.p.inSchema(identName(src, t)) {
				c.refuse(Refusal{})
			}
			g.dropSchema = false
		}
		return
	}
	if g.explain && g.depth == 0 {
		switch w {
		case pwSelect, pwWith, pwValues, pwTable, pwInsert, pwReplace, pwUpdate, pwDelete:
			g.explain = false
			c.head(g, *lx, t, w)
			return
		}
		if t.is('(') {
			g.explain = false
			c.head(g, *lx, t, w)
			return
		}
	}
	if g.with && g.depth == 0 {
		switch w {
		case pwSelect, pwValues, pwTable:
			g.with = false
		case pwInsert, pwReplace, pwUpdate, pwDelete:
			g.with = false
			c.head(g, *lx, t, w)
			return
		}
	}

	switch {
	case t.is('('):
		keep := g.pending && !g.noParen
		g.depth++
		g.pending = keep
		if keep {
			g.lists |= bitAt(g.depth) // FROM (a, b)
		}
		if prevW == pwFromFunc {
			g.fromCalls |= bitAt(g.depth)
		}
		return
	case t.is(')'):
		if g.depth < 63 {
			g.lists &= bitAt(g.depth) - 1
			g.fromCalls &= bitAt(g.depth) - 1
		}
		g.depth--
		g.pending = false
		return
	case t.is(','):
		g.pending, g.noParen = g.lists&bitAt(g.depth) != 0, false
		return
	}

	// Names: in a table's place, qualified by the protected schema, or
	// anywhere (for unsure statements).
	if t.kind == tQuoted || t.kind == tWord && (w == pwNone || g.pending && c.p.table(src[t.start:t.end]) != "") {
		if g.pending {
			g.pending = false
			c.tableRef(g, *lx, t)
			return
		}
		name := c.p.table(identName(src, t))
		switch {
		case name == "":
		case qualified:
			// schema.name counts when the schema is the protected one
			// (another schema's table, or a column of a table, does not).
			if (prev2.kind == tWord || prev2.kind == tQuoted) && c.p.inSchema(identName(src, prev2)) {
				g.noteRef(name)
			}
		case c.dbProtected():
			g.noteAny(name) // a name elsewhere than a table's place, or name.column
		}
		return
	}

	switch w {
	case pwFor:
		if n := peekPW(*lx); n == pwUpdate || n == pwShare {
			g.locking = true
		}
	case pwLock:
		q := *lx
		if lookupPWTok(&q, q.next()) == pwIn && lookupPWTok(&q, q.next()) == pwShare && lookupPWTok(&q, q.next()) == pwMode {
			g.locking = true
		}
	}

	// Words that introduce a table, carry the introduction to the next
	// word (modifiers), or end a list of tables.
	switch w {
	case pwFrom:
		if g.fromCalls&bitAt(g.depth) != 0 {
			g.pending = false // EXTRACT(YEAR FROM d), TRIM(x FROM s)
			break
		}
		g.pending, g.noParen = true, false
		g.lists |= bitAt(g.depth)
	case pwTable, pwTables, pwOf:
		g.pending, g.noParen = true, false
		g.lists |= bitAt(g.depth)
	case pwUsing:
		g.pending, g.noParen = true, true
		g.lists |= bitAt(g.depth)
	case pwJoin, pwInto, pwReferences:
		g.pending, g.noParen = true, false
	case pwLike, pwOn:
		g.pending, g.noParen = g.ddl, false
	case pwTo, pwRename:
		g.pending, g.noParen = g.renames, false
	case pwAs:
		g.pending = g.pending && prevW == pwRename // ALTER TABLE t RENAME AS u
	case pwModifier, pwIf, pwNot, pwExists:
		// LOW_PRIORITY, IGNORE, TEMPORARY, IF NOT EXISTS, ...: the
		// introduction goes on.
	case pwSelect, pwSet, pwValues, pwUpdate, pwEnder:
		g.pending = false
		g.lists &^= bitAt(g.depth)
	default:
		g.pending = false
	}
}

// tableRef reads the name in a table's place that starts at token t
// ([schema .] table); lx is just after t.
func (c *protCheck) tableRef(g *protStmt, lx lexer, t token) {
	src := lx.src
	var schema, table []byte
	if lx.next().is('.') {
		n := lx.next()
		if n.kind != tWord && n.kind != tQuoted {
			return
		}
		schema, table = identName(src, t), identName(src, n)
	} else {
		table = identName(src, t)
	}
	name := c.p.table(table)
	switch {
	case name == "":
	case schema == nil && c.dbProtected(), schema != nil && c.p.inSchema(schema):
		g.noteRef(name)
	}
}

// head classifies the statement whose first token (or whose statement,
// after EXPLAIN or WITH) is t; lx is just after t.
func (c *protCheck) head(g *protStmt, lx lexer, t token, w pw) {
	g.class = classWrite
	if t.is('(') {
		g.class = classRead
		g.depth++
		return
	}
	unsure := func(where string) { g.class, g.where = classUnsure, where }
	if t.kind != tWord {
		unsure(whereCompound)
		return
	}
	switch w {
	case pwSelect, pwValues, pwShow, pwHelp, pwDo, pwCall, pwChecksum:
		g.class = classRead
	case pwTable:
		g.class = classRead
		g.pending = true
	case pwWith:
		g.class, g.with = classRead, true
	case pwDescribe:
		g.class, g.explain = classRead, true
	case pwAnalyze:
		switch peekPW(lx) {
		case pwTable, pwModifier, pwNoWriteToBinlog:
			// ANALYZE TABLE: maintenance
		default:
			g.class, g.explain = classRead, true // ANALYZE SELECT runs it
		}
	case pwSet:
		g.class = classRead
		if peekPW(lx) == pwStatement {
			unsure(whereSetStmt)
		}
	case pwUse:
		g.class = classUse
	case pwInsert, pwReplace, pwTruncate, pwHandler:
		g.pending = true
	case pwUpdate, pwDelete:
		g.pending = true
		g.lists |= bitAt(g.depth)
	case pwDrop:
		g.ddl = true
		g.dropSchema = peekPW(lx) == pwDatabase
	case pwCreate, pwAlter:
		g.ddl, g.renames = true, w == pwAlter
		if definesProgram(lx) {
			unsure(whereProgram)
		}
	case pwRename:
		g.ddl, g.renames = true, true
	case pwGrant, pwRevoke:
		g.ddl = true
	case pwBackup:
		unsure(whereBackup)
	case pwBegin:
		if peekPW(lx) == pwNot {
			unsure(whereCompound)
		}
	case pwCompound, pwIf, pwFor:
		unsure(whereCompound)
	case pwNone:
		if lx.next().is(':') {
			unsure(whereCompound) // a label: lbl: BEGIN ... END
		}
	}
}

// definesProgram reports whether a CREATE or ALTER (lx just after it)
// defines a stored routine, trigger, event or package, whose body is
// statements of their own.
func definesProgram(lx lexer) bool {
	for i := 0; i < 16; i++ {
		t := lx.next()
		if t.kind == tEOF || t.is(';') {
			return false
		}
		switch lookupPWTok(&lx, t) {
		case pwProgram:
			return true
		case pwTable, pwView, pwIndex, pwDatabase, pwUser:
			return false
		}
	}
	return false
}

// identName returns the name a word or quoted identifier token stands
// for: a quoted one without its quotes (doubled quotes are left doubled;
// no protected name holds a quote).
func identName(src []byte, t token) []byte {
	b := src[t.start:t.end]
	if t.kind == tQuoted && len(b) >= 2 && !t.open() {
		return b[1 : len(b)-1]
	}
	return b
}

// pw is a word CheckProtected acts on.
type pw uint8

const (
	pwNone pw = iota
	pwSelect
	pwValues
	pwTable
	pwTables
	pwWith
	pwShow
	pwHelp
	pwDo
	pwCall
	pwChecksum
	pwDescribe
	pwAnalyze
	pwSet
	pwStatement
	pwUse
	pwInsert
	pwReplace
	pwUpdate
	pwDelete
	pwTruncate
	pwHandler
	pwDrop
	pwCreate
	pwAlter
	pwRename
	pwGrant
	pwRevoke
	pwBackup
	pwBegin
	pwNot
	pwIf
	pwExists
	pwFor
	pwCompound
	pwProgram
	pwView
	pwIndex
	pwUser
	pwDatabase
	pwFrom
	pwJoin
	pwInto
	pwUsing
	pwOf
	pwReferences
	pwLike
	pwOn
	pwTo
	pwAs
	pwLock
	pwIn
	pwShare
	pwMode
	pwModifier
	pwNoWriteToBinlog
	pwEnder
	pwFromFunc
)

var pwWords = map[string]pw{
	"select": pwSelect, "values": pwValues, "value": pwEnder, "table": pwTable, "tables": pwTables,
	"with": pwWith, "show": pwShow, "help": pwHelp, "do": pwDo, "call": pwCall, "checksum": pwChecksum,
	"describe": pwDescribe, "desc": pwDescribe, "explain": pwDescribe, "analyze": pwAnalyze,
	"set": pwSet, "statement": pwStatement, "use": pwUse,
	"insert": pwInsert, "replace": pwReplace, "update": pwUpdate, "delete": pwDelete,
	"truncate": pwTruncate, "handler": pwHandler, "drop": pwDrop, "create": pwCreate, "alter": pwAlter,
	"rename": pwRename, "grant": pwGrant, "revoke": pwRevoke, "backup": pwBackup, "begin": pwBegin,
	"not": pwNot, "if": pwIf, "exists": pwExists, "for": pwFor,
	"case": pwCompound, "while": pwCompound, "loop": pwCompound, "repeat": pwCompound, "declare": pwCompound,
	"else": pwCompound, "elseif": pwCompound, "end": pwCompound, "until": pwCompound, "when": pwCompound,
	"open": pwCompound, "fetch": pwCompound, "close": pwCompound, "leave": pwCompound, "iterate": pwCompound,
	"return": pwCompound, "signal": pwCompound, "resignal": pwCompound,
	"procedure": pwProgram, "function": pwProgram, "trigger": pwProgram, "event": pwProgram, "package": pwProgram,
	"view": pwView, "index": pwIndex, "user": pwUser, "role": pwUser, "sequence": pwView, "server": pwUser,
	"database": pwDatabase, "schema": pwDatabase,
	"from": pwFrom, "join": pwJoin, "straight_join": pwJoin, "into": pwInto, "using": pwUsing, "of": pwOf,
	"references": pwReferences, "like": pwLike, "on": pwOn, "to": pwTo, "as": pwAs,
	"lock": pwLock, "in": pwIn, "share": pwShare, "mode": pwMode,
	"low_priority": pwModifier, "delayed": pwModifier, "high_priority": pwModifier, "ignore": pwModifier,
	"quick": pwModifier, "temporary": pwModifier, "online": pwModifier, "lateral": pwModifier,
	"concurrent": pwModifier, "local": pwModifier, "no_write_to_binlog": pwNoWriteToBinlog,
	"where": pwEnder, "group": pwEnder, "order": pwEnder, "having": pwEnder, "limit": pwEnder,
	"returning": pwEnder, "window": pwEnder, "duplicate": pwEnder,
	"extract": pwFromFunc, "trim": pwFromFunc, "substring": pwFromFunc, "substr": pwFromFunc,
}

// lookupPW returns the pw of word b, matched case-insensitively.
func lookupPW(b []byte) pw {
	if len(b) < 2 || len(b) > 20 {
		return pwNone
	}
	var buf [20]byte
	for i, c := range b {
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		buf[i] = c
	}
	return pwWords[string(buf[:len(b)])]
}

// lookupPWTok is lookupPW of token t, a word not after '.'.
func lookupPWTok(lx *lexer, t token) pw {
	if t.kind != tWord {
		return pwNone
	}
	return lookupPW(lx.src[t.start:t.end])
}

// peekPW returns the pw of the token after lx.
func peekPW(lx lexer) pw { return lookupPWTok(&lx, lx.next()) }
