package sqlscan

import (
	"bytes"
	"math"
)

// Kill is a parsed KILL statement:
// KILL [HARD|SOFT] [CONNECTION|QUERY] {<id> | ID <query id> | USER <user>}.
type Kill struct {
	// Query is true for KILL QUERY ..., false for KILL [CONNECTION] ....
	Query bool
	// ID is the thread id (the query id with QueryID); zero when it could
	// not be parsed.
	ID uint64
	// QueryID is true for KILL QUERY ID n (MariaDB: n is a query id).
	QueryID bool
	// User is the account of KILL ... USER name: a bare or quoted name
	// (unquoted), with any @host part dropped; empty otherwise.
	User string
	// OK is true when the text is exactly one such statement, with an
	// optional trailing ';' and whitespace or comments, and its id is a
	// decimal uint64 or its user a name. A second statement, an id that is
	// not a decimal uint64 (a '?' placeholder, say) or an unterminated
	// comment leave OK false.
	OK bool
}

// Info is what Scan learns about a statement text.
type Info struct {
	// Kind is the kind of the first non-empty statement; KindOther when
	// there is none.
	Kind Kind
	// Statements is the number of non-empty statements separated by ';'
	// outside literals and comments: "SELECT 1;" is 1, "SELECT 1; SELECT 2"
	// is 2, "" and comment-only texts are 0. Compound statements (BEGIN NOT
	// ATOMIC ... END, stored program bodies) are counted by their ';' too.
	Statements int
	// Features is the set of features found in all statements.
	Features Feature
	// Kill is filled when Kind is KindKill (the zero Kill otherwise).
	Kill Kill
	// LastInsertIDColumn is set only when the whole text is exactly
	// SELECT LAST_INSERT_ID() (or SELECT @@identity, SELECT
	// @@last_insert_id, with an optional SESSION or LOCAL scope: the same
	// value) with an optional alias (AS x, x, AS `x`, AS 'x', AS "x"), in
	// any letter case, with optional whitespace, comments and one trailing
	// ';'. It is the column name MySQL reports: the alias, or the
	// expression as written ("last_insert_id()", "@@IDENTITY").
	LastInsertIDColumn string
	// LastInsertIDVar is set with LastInsertIDColumn when the value is
	// read as @@identity or @@last_insert_id (a column that may be NULL).
	LastInsertIDVar bool
	// ConnectionIDColumn is the same for SELECT CONNECTION_ID().
	ConnectionIDColumn string
	// RowCountColumn is the same for SELECT ROW_COUNT().
	RowCountColumn string
	// TagComments holds the bodies (the text between /* and */, or after #
	// or -- to the end of the line) of the first NTagComments ordinary
	// comments that mention conn_tag, in order; comments inside literals
	// and executable comments are code or text, never tag comments. Which
	// of them carries the tag is the attribution package's to decide.
	TagComments  [MaxTagComments]Span
	NTagComments int
	// TagResume is where the text goes on after the last tag comment, for
	// MoreTagComments when there may be more than MaxTagComments.
	TagResume int
	// Vars says which kinds of session variables the text names (see
	// VarKind): as @@name anywhere, as a name a SET assigns, or, for
	// VarLists, the word VARIABLES (SHOW VARIABLES, *_VARIABLES tables).
	Vars VarKind
	// Plain is set when the text is one BEGIN [WORK], START TRANSACTION,
	// COMMIT [WORK] or ROLLBACK [WORK] with nothing else but comments and
	// one trailing ';'.
	Plain bool
	// CallSchema and CallName are the routine a CALL statement that starts
	// the text names: the schema (empty when unqualified) and the name,
	// without their quotes.
	CallSchema, CallName Span
	// Shape identifies the text's form with its literals taken out: the
	// 64-bit FNV-1a hash of its whole digest (see Mode.AppendDigest).
	// Statements that differ only in their literals, comments, spacing,
	// the letter case of keywords and the length of IN and VALUES lists of
	// literals have the same shape; it is the same in every process.
	Shape uint64
	// PrimaryHint is set when an ordinary comment (not one inside a
	// literal, not an executable one) holds "holdfast:primary", as in
	// /* holdfast:primary */: the statement must not go to a replica.
	PrimaryHint bool
	// NamesProtected is set, by ScanProtected only, when a word or quoted
	// identifier of the text, anywhere outside literals and ordinary
	// comments, is the name of one of the protected tables (in any letter
	// case, qualified or not), or when a statement of the text drops a
	// database. A text without it, and without FeatExecImmediate and
	// FeatSQLPrepare (whose literal text Scan does not read), writes none
	// of those tables; one with it may, and Mode.CheckProtected tells.
	NamesProtected bool
}

// MaxTagComments is how many tag comments Info keeps.
const MaxTagComments = 4

// MoreTagComments goes on lexing sql under m from resume (an Info's
// TagResume, or a previous call's next: always just after a tag comment,
// outside any literal) and returns the next tag comments, at most
// MaxTagComments, and where to resume after them. It is for the text with
// more tag comments than an Info keeps, none of which carried a tag.
func (m Mode) MoreTagComments(sql []byte, resume int) (tags []Span, next int) {
	lx := lexer{src: sql, mode: m, pos: resume, haltFull: true}
	for lx.ntags < MaxTagComments {
		if t := lx.next(); t.kind == tEOF {
			break
		}
	}
	return lx.tags[:lx.ntags], lx.tagsNext
}

// VarKind is a set of kinds of session variables.
type VarKind uint8

const (
	// VarTimeouts: a variable whose name ends in _timeout (wait_timeout,
	// interactive_timeout, ...).
	VarTimeouts VarKind = 1 << iota
	// VarTracking: a session_track_* setting.
	VarTracking
	// VarLists: a listing of variables (SHOW VARIABLES,
	// information_schema.SESSION_VARIABLES, ...).
	VarLists
)

// varKindOf returns the kind of the variable named name.
func varKindOf(name []byte) VarKind {
	if dot := bytes.LastIndexByte(name, '.'); dot >= 0 {
		name = name[dot+1:]
	}
	name = bytes.Trim(name, "`")
	switch {
	case len(name) > 8 && eqFold(name[len(name)-8:], "_timeout"):
		return VarTimeouts
	case len(name) > 14 && eqFold(name[:14], "session_track_"):
		return VarTracking
	}
	return 0
}

// Scan classifies sql, lexed with MySQL's default sql_mode. See Mode.Scan.
func Scan(sql []byte) Info { return Mode(0).Scan(sql) }

// Scan classifies sql, lexed under mode. It never modifies sql, never
// panics, runs in time linear in len(sql) and does not allocate, except that
// a LastInsertIDColumn other than the common spellings LAST_INSERT_ID() and
// last_insert_id() is a new string (the result never aliases sql).
func (m Mode) Scan(sql []byte) Info { return m.ScanProtected(sql, nil) }

// ScanProtected is Scan that also sets Info.NamesProtected for the tables
// of p (nil: none), at the cost of one length and letter test per word.
func (m Mode) ScanProtected(sql []byte, p *Protected) Info {
	s := scanner{lx: lexer{src: sql, mode: m}, dg: digester{src: sql, out: digestOut{hashing: true, h: fnvOffset}}, prot: p}
	for {
		t := s.lx.next()
		if t.kind == tEOF {
			s.end()
			s.info.TagComments, s.info.NTagComments, s.info.TagResume = s.lx.tags, int(s.lx.ntags), s.lx.tagsNext
			s.info.Shape = s.dg.out.h
			s.info.PrimaryHint = s.lx.primaryHint
			return s.info
		}
		s.dg.feed(t)
		if t.is(';') {
			s.end()
		} else {
			s.step(t)
		}
		s.ntok++
	}
}

// scanner is the state of one Scan.
type scanner struct {
	lx   lexer
	dg   digester // the shape, hashed as the tokens go by
	info Info
	ntok int // tokens before the current one, in the whole text
	st   stmt
	prot *Protected // the tables NamesProtected looks for; nil: none
}

// stmt is the state of the current statement; the zero stmt is its start.
type stmt struct {
	nonEmpty bool
	headDone bool // the statement's head token has been classified
	subHead  bool // the next token starts an inner statement
	subMain  bool // ... whose kind is the statement's kind (SET STATEMENT ... FOR)
	prevDot  bool // the previous token was '.'
	callExec bool // in a CALL or EXECUTE: user variables may be OUT parameters
	into     uint8
	create   uint8
	kind     Kind
	depth    int
	pending  Feature // a function name whose feature needs a following '('
	// callee: the previous token is a name a '(' would call (see
	// calleeStep); calleeTok is that token, qualified whether a '.'
	// preceded it. intro: the previous token introduces a table or
	// routine name (INTO, TABLE, CALL, ...); named: the name being read
	// (across its '.') was introduced so.
	callee    bool
	qualified bool
	intro     bool
	named     bool
	calleeTok token
	set       setMachine
	flush     flushMachine
	with      withMachine
}

func (s *scanner) end() {
	if s.st.nonEmpty {
		s.info.Statements++
		if s.info.Statements == 1 {
			s.info.Kind = s.st.kind
		}
	}
	s.st = stmt{}
}

// word returns t's keyword, or kwNone when t is not a word.
func (s *scanner) word(t token) kw {
	if t.kind != tWord {
		return kwNone
	}
	return lookupKW(s.lx.src[t.start:t.end])
}

func (s *scanner) step(t token) {
	st := &s.st
	st.nonEmpty = true
	if s.prot != nil && (t.kind == tWord || t.kind == tQuoted) && !s.info.NamesProtected {
		s.info.NamesProtected = s.prot.names(s.lx.src, t)
	}
	qualified := st.prevDot
	w := kwNone
	if !qualified {
		w = s.word(t)
	}
	st.prevDot = t.is('.')
	if st.callee && t.is('(') && s.calls() {
		s.info.Features |= FeatFuncCall
	}
	s.calleeStep(t, w, qualified)
	wantHead := !st.headDone && !t.is('(')
	wantSub := st.subHead
	st.subHead = false
	if st.pending != 0 {
		if t.is('(') {
			s.info.Features |= st.pending
		}
		st.pending = 0
	}

	// State machines started by an earlier token.
	if st.set.active {
		s.setStep(t, w)
	}
	if st.flush.state != 0 {
		s.flushStep(t, w)
	}
	if st.with.active && t.kind == tWord && st.depth == st.with.depth {
		s.withStep(w)
	}
	s.intoStep(t, w)
	s.createStep(w)

	switch t.kind {
	case tSysVar:
		name := s.lx.src[t.start+2 : t.end]
		s.info.Vars |= varKindOf(name)
		if isLastInsertIDVar(name) {
			s.info.Features |= FeatLastInsertID
		}
	case tUserVar:
		s.info.Features |= FeatUserVarRef
		if st.callExec {
			s.info.Features |= FeatUserVarAssign
		}
	case tAssign:
		s.info.Features |= FeatUserVarAssign
	case tPunct:
		switch t.ch() {
		case '(':
			st.depth++
		case ')':
			st.depth--
		}
	case tWord:
		if w == kwNone && t.end-t.start >= 9 && eqFold(s.lx.src[t.end-9:t.end], "variables") {
			s.info.Vars |= VarLists
		}
		switch w {
		case kwFor, kwLock:
			// (A FOR that ended SET STATEMENT's assignments starts its
			// statement instead: subHead.)
			if !st.subHead && s.lockingClause(w) {
				s.info.Features |= FeatLocking
			}
		case kwSQLCalcFoundRows:
			s.info.Features |= FeatCalcFoundRows
		case kwGetLock:
			st.pending = FeatGetLock
		case kwNextval, kwSetval, kwLastval:
			st.pending = FeatSideEffect
		case kwNext, kwPrevious:
			if p := s.lx; s.word(p.next()) == kwValue {
				s.info.Features |= FeatSideEffect
			}
		case kwLastInsertID:
			st.pending = FeatLastInsertID
		case kwFoundRows:
			st.pending = FeatFoundRowsFunc
		case kwRowCount:
			st.pending = FeatRowCount
		case kwIsFreeLock, kwIsUsedLock:
			st.pending = FeatLockInfo
		case kwConnectionID:
			st.pending = FeatConnectionID
		case kwExecute, kwPrepare, kwDrop:
			s.dynamicOrDrop(w)
		}
	}

	if wantHead {
		st.headDone = true
		s.head(t, w, true, s.ntok == 0)
	} else if wantSub {
		s.head(t, w, st.subMain, false)
	}
	// The next token starts a statement of a compound-statement body
	// (MariaDB runs BEGIN NOT ATOMIC, IF, WHILE, LOOP, REPEAT at top level).
	switch w {
	case kwThen, kwElse, kwAtomic, kwLoop, kwRepeat:
		st.subHead, st.subMain = true, false
	case kwDo, kwBegin:
		if !wantHead {
			st.subHead, st.subMain = true, false
		}
	}
}

// dynamicOrDrop looks after the word w just read, EXECUTE, PREPARE or
// DROP, wherever it stands (inside a compound statement or a handler too):
// EXECUTE IMMEDIATE and PREPARE name FROM run statement text Scan does not
// read (FeatExecImmediate, FeatSQLPrepare), and DROP DATABASE may drop the
// protected tables' schema (NamesProtected).
func (s *scanner) dynamicOrDrop(w kw) {
	p := s.lx
	n := p.next()
	src := s.lx.src
	switch w {
	case kwExecute:
		if n.kind == tWord && eqFold(src[n.start:n.end], "immediate") {
			s.info.Features |= FeatExecImmediate
		}
	case kwPrepare:
		if n.kind == tWord || n.kind == tQuoted {
			if f := p.next(); f.kind == tWord && eqFold(src[f.start:f.end], "from") {
				s.info.Features |= FeatSQLPrepare
			}
		}
	case kwDrop:
		if s.prot != nil && n.kind == tWord && (eqFold(src[n.start:n.end], "database") || eqFold(src[n.start:n.end], "schema")) {
			s.info.NamesProtected = true // which database, CheckProtected reads
		}
	}
}

// calleeStep notes whether token t is a name that a following '(' would
// call: a word or quoted identifier, not one a table or routine name
// follows (INTO t, TABLE t, REFERENCES t, ON t, CALL p, a CTE's name).
func (s *scanner) calleeStep(t token, w kw, qualified bool) {
	st := &s.st
	intro := st.intro
	st.intro, st.callee = false, false
	if t.kind != tWord && t.kind != tQuoted {
		return
	}
	if qualified {
		st.callee, st.qualified, st.calleeTok = !st.named, true, t
		return
	}
	switch w {
	case kwInto, kwTable, kwReferences, kwOn, kwFunction, kwProcedure, kwView, kwIndex, kwKey, kwTrigger, kwCall, kwInsert, kwReplace:
		st.intro, st.named = true, false
		return
	}
	st.named = intro || st.with.active && st.depth == st.with.depth
	st.callee, st.qualified, st.calleeTok = !st.named, false, t
}

// calls reports whether the name before a '(' (st.calleeTok) may call a
// stored function: it is quoted or qualified, or a word that is neither
// reserved nor a built-in.
func (s *scanner) calls() bool {
	t := s.st.calleeTok
	if t.kind == tQuoted || s.st.qualified {
		return true
	}
	var buf [maxKeyword]byte
	up, _, reserved := lookupKeyword(s.lx.src[t.start:t.end], &buf)
	if reserved {
		return false
	}
	return up == nil || !isBuiltin(up) // longer than any keyword: no built-in either
}

// head classifies the statement starting at token t. main says whether its
// kind is the current statement's kind; exact whether t is the first token
// of the whole text.
func (s *scanner) head(t token, w kw, main, exact bool) {
	st := &s.st
	f := &s.info.Features
	p := s.lx // a cursor after t, to look ahead
	k := KindOther
	switch w {
	case kwSelect:
		k = KindSelect
		if exact {
			s.selectOne(p)
		}
	case kwValues, kwTable:
		k = KindSelect
	case kwWith:
		k = KindSelect
		st.with = withMachine{active: true, main: main, depth: st.depth}
	case kwInsert:
		k = KindInsert
	case kwUpdate:
		k = KindUpdate
	case kwDelete:
		k = KindDelete
	case kwReplace:
		k = KindReplace
	case kwSet:
		k = KindSet
		st.set = setMachine{active: true, main: main, expect: true, first: true, depth: st.depth}
		if s.word(p.next()) == kwTransaction {
			k = KindSetTransaction
		}
	case kwUse:
		k = KindUse
	case kwBegin:
		k = KindBegin
		if s.word(p.next()) == kwNot {
			k = KindOther
		}
		s.info.Plain = exact && s.plainTail(s.lx, kwWork)
	case kwStart:
		if s.word(p.next()) == kwTransaction {
			k = KindBegin
			s.info.Plain = exact && s.plainTail(p, kwNone)
		}
	case kwCommit:
		k = KindCommit
		s.info.Plain = exact && s.plainTail(s.lx, kwWork)
	case kwRollback:
		k = KindRollback
		n := s.word(p.next())
		if n == kwWork {
			n = s.word(p.next())
		}
		if n == kwTo {
			k = KindOther
		}
		s.info.Plain = exact && s.plainTail(s.lx, kwWork)
	case kwKill:
		k = KindKill
		*f |= FeatKill
		if main && s.info.Statements == 0 {
			s.info.Kill = s.kill(p, exact)
		}
	case kwLoad:
		if n := s.word(p.next()); n == kwData || n == kwXML {
			k = KindLoadData
			n = s.word(p.next())
			for i := 0; i < 2 && (n == kwLowPriority || n == kwConcurrent); i++ {
				n = s.word(p.next())
			}
			if n == kwLocal {
				k = KindLoadDataLocal
				*f |= FeatLocalInfile
			}
		}
	case kwCall:
		k = KindCall
		st.callExec = true
		if exact {
			s.info.CallSchema, s.info.CallName = s.callTarget(p)
		}
	case kwPrepare:
		k = KindPrepare
		*f |= FeatSQLPrepare
	case kwExecute:
		k = KindExecute
		st.callExec = true
	case kwDeallocate:
		k = KindDeallocate
	case kwDrop:
		if s.word(p.next()) == kwPrepare {
			k = KindDeallocate
		}
	case kwLock:
		switch s.word(p.next()) {
		case kwTable, kwTables:
			k = KindLockTables
			*f |= FeatLockTables
		case kwInstance:
			*f |= FeatLockTables
		}
	case kwUnlock:
		switch s.word(p.next()) {
		case kwTable, kwTables:
			k = KindUnlockTables
		}
	case kwFlush:
		n := s.word(p.next())
		if n == kwNoWriteToBinlog || n == kwLocal {
			n = s.word(p.next())
		}
		if n == kwTable || n == kwTables {
			st.flush = flushMachine{state: 1, main: main, depth: st.depth}
		}
	case kwShow:
		k = KindShow
	case kwXA:
		k = KindXA
		if n := s.word(p.next()); n == kwStart || n == kwBegin {
			*f |= FeatXA
		}
	case kwHandler:
		k = KindHandler
		if s.handlerOpen(p) {
			*f |= FeatHandler
		}
	case kwDo:
		k = KindDo
	case kwBackup:
		if s.word(p.next()) == kwLock {
			*f |= FeatLockTables
		}
	}
	if main {
		st.kind = k
	}
}

// lockingClause reports whether the word w (FOR or LOCK) just read starts
// a locking read: FOR UPDATE, FOR SHARE, LOCK IN SHARE MODE.
func (s *scanner) lockingClause(w kw) bool {
	p := s.lx
	n := s.word(p.next())
	if w == kwFor {
		return n == kwUpdate || n == kwShare
	}
	return n == kwIn && s.word(p.next()) == kwShare && s.word(p.next()) == kwMode
}

// plainTail reports whether the rest of the text after p is, apart from
// comments, an optional word opt and an optional ';'.
func (s *scanner) plainTail(p lexer, opt kw) bool {
	t := p.next()
	if opt != kwNone && s.word(t) == opt {
		t = p.next()
	}
	if t.is(';') {
		t = p.next()
	}
	return t.kind == tEOF && !p.unterminated
}

// callTarget returns the schema (empty when none) and name of the routine
// a CALL names, p being just after CALL; quotes are left out.
func (s *scanner) callTarget(p lexer) (schema, name Span) {
	unq := func(t token) Span {
		if t.kind == tQuoted && t.end-t.start >= 2 && !t.open() {
			return Span{t.start + 1, t.end - 1}
		}
		return Span{t.start, t.end}
	}
	t := p.next()
	if t.kind != tWord && t.kind != tQuoted {
		return Span{}, Span{}
	}
	name = unq(t)
	if p.next().is('.') {
		if n := p.next(); n.kind == tWord || n.kind == tQuoted {
			return name, unq(n)
		}
		return Span{}, Span{}
	}
	return Span{}, name
}

// handlerOpen reports whether p is at "name [. name] OPEN".
func (s *scanner) handlerOpen(p lexer) bool {
	t := p.next()
	if t.kind != tWord && t.kind != tQuoted {
		return false
	}
	t = p.next()
	if t.is('.') {
		if t = p.next(); t.kind != tWord && t.kind != tQuoted {
			return false
		}
		t = p.next()
	}
	return s.word(t) == kwOpen
}

// kill parses the rest of a KILL statement from p.
func (s *scanner) kill(p lexer, exact bool) Kill {
	var k Kill
	t := p.next()
	if w := s.word(t); w == kwHard || w == kwSoft {
		t = p.next()
	}
	switch s.word(t) {
	case kwConnection:
		t = p.next()
	case kwQuery:
		k.Query = true
		t = p.next()
	}
	switch s.word(t) {
	case kwID:
		k.QueryID = true
		t = p.next()
	case kwUser:
		t = p.next()
		switch t.kind {
		case tWord:
			k.User = string(s.lx.src[t.start:t.end])
		case tString, tQuoted:
			k.User = unquote(s.lx.src[t.start:t.end])
		default:
			return k
		}
		if t = p.next(); t.kind == tHost || t.kind == tUserVar {
			t = p.next() // the @host part (after a bare name, lexed as a variable)
		}
		if t.is(';') {
			t = p.next()
		}
		k.OK = exact && k.User != "" && t.kind == tEOF && !p.unterminated
		return k
	}
	if t.kind != tNumber {
		return k
	}
	var id uint64
	for _, c := range s.lx.src[t.start:t.end] {
		d := uint64(c - '0')
		if !isDigit(c) || id > (math.MaxUint64-d)/10 {
			return k
		}
		id = id*10 + d
	}
	k.ID = id
	if t = p.next(); t.is(';') {
		t = p.next()
	}
	k.OK = exact && t.kind == tEOF && !p.unterminated
	return k
}

// unquote strips a quoted token's quotes and undoubles its quote character.
func unquote(b []byte) string {
	if len(b) < 2 {
		return string(b)
	}
	q := b[0]
	in := b[1 : len(b)-1]
	if b[len(b)-1] != q {
		in = b[1:]
	}
	return string(bytes.ReplaceAll(in, []byte{q, q}, []byte{q}))
}

// selectOne fills the Info's column of a text that is SELECT of one value
// holdfast knows (LastInsertIDColumn, ConnectionIDColumn, RowCountColumn),
// p being just after the SELECT.
func (s *scanner) selectOne(p lexer) {
	q := p
	switch t := q.next(); t.kind {
	case tWord:
		switch fn := s.word(t); fn {
		case kwLastInsertID:
			s.info.LastInsertIDColumn = s.singleCall(p, fn)
		case kwConnectionID:
			s.info.ConnectionIDColumn = s.singleCall(p, fn)
		case kwRowCount:
			s.info.RowCountColumn = s.singleCall(p, fn)
		}
	case tSysVar:
		if isLastInsertIDVar(s.lx.src[t.start+2 : t.end]) {
			s.info.LastInsertIDColumn = s.singleValue(q, t.start, t.end)
			s.info.LastInsertIDVar = s.info.LastInsertIDColumn != ""
		}
	}
}

// isLastInsertIDVar reports whether name (after "@@") is the session's
// last insert id: identity or last_insert_id, with an optional session or
// local scope.
func isLastInsertIDVar(name []byte) bool {
	if len(name) < 8 || len(name) > 26 {
		return false
	}
	if dot := bytes.IndexByte(name, '.'); dot >= 0 {
		if scope := bytes.Trim(name[:dot], "`"); !eqFold(scope, "session") && !eqFold(scope, "local") {
			return false
		}
		name = name[dot+1:]
	}
	name = bytes.Trim(name, "`")
	return eqFold(name, "identity") || eqFold(name, "last_insert_id")
}

// singleCall returns the column name when p is at "FN() [[AS] alias] [;]"
// and the end of the text, fn being FN's keyword, else "".
func (s *scanner) singleCall(p lexer, fn kw) string {
	t := p.next()
	if s.word(t) != fn || !p.next().is('(') {
		return ""
	}
	start := t.start
	if t = p.next(); !t.is(')') {
		return ""
	}
	return s.singleValue(p, start, t.end)
}

// singleValue returns the column name when the value src[start:end] is
// followed by "[[AS] alias] [;]" and the end of the text (p being just
// after the value), else "".
func (s *scanner) singleValue(p lexer, start, end int) string {
	src := s.lx.src
	t := p.next()
	var alias token
	if s.word(t) == kwAs {
		alias = p.next()
		if !isAlias(src, alias) {
			return ""
		}
		t = p.next()
	} else if isAlias(src, t) {
		alias = t
		t = p.next()
	}
	if t.is(';') {
		t = p.next()
	}
	if t.kind != tEOF || p.unterminated {
		return ""
	}
	switch alias.kind {
	case tWord:
		return string(src[alias.start:alias.end])
	case tQuoted:
		return unquoteIdent(src[alias.start:alias.end])
	case tString:
		return string(appendString(nil, src[alias.start:alias.end], s.lx.mode))
	}
	switch b := src[start:end]; string(b) {
	case "LAST_INSERT_ID()":
		return "LAST_INSERT_ID()"
	case "last_insert_id()":
		return "last_insert_id()"
	case "CONNECTION_ID()":
		return "CONNECTION_ID()"
	case "connection_id()":
		return "connection_id()"
	case "ROW_COUNT()":
		return "ROW_COUNT()"
	case "row_count()":
		return "row_count()"
	case "@@identity":
		return "@@identity"
	case "@@IDENTITY":
		return "@@IDENTITY"
	default:
		return string(b)
	}
}

// isAlias reports whether t can be a column alias: a word that is not a
// reserved word, a quoted identifier or a plain '...' / "..." string, not
// empty and terminated.
func isAlias(src []byte, t token) bool {
	if t.open() || t.end-t.start < 1 {
		return false
	}
	switch t.kind {
	case tWord:
		var buf [maxKeyword]byte
		_, _, reserved := lookupKeyword(src[t.start:t.end], &buf)
		return !reserved
	case tQuoted, tString:
		return t.end-t.start > 2 && (src[t.start] == '\'' || src[t.start] == '"' || src[t.start] == '`')
	}
	return false
}

func (s *scanner) intoStep(t token, w kw) {
	st := &s.st
	switch st.into {
	case 1: // after INTO or ',': a target
		st.into = 0
		switch t.kind {
		case tUserVar:
			s.info.Features |= FeatUserVarAssign
			st.into = 2
		case tWord, tQuoted:
			if w == kwOutfile || w == kwDumpfile {
				s.info.Features |= FeatSideEffect
			}
			st.into = 2
		}
	case 2: // after a target
		st.into = 0
		if t.is(',') {
			st.into = 1
		}
	}
	if w == kwInto {
		st.into = 1
	}
}

// createStep follows CREATE [OR REPLACE] TEMPORARY TABLE.
func (s *scanner) createStep(w kw) {
	st := &s.st
	c := st.create
	st.create = 0
	switch {
	case w == kwCreate:
		st.create = 1
	case c == 1 && w == kwOr:
		st.create = 2
	case c == 2 && w == kwReplace:
		st.create = 3
	case (c == 1 || c == 3) && w == kwTemporary:
		st.create = 4
	case c == 4 && w == kwTable:
		s.info.Features |= FeatTempTable
	}
}

// withMachine finds the statement a WITH clause introduces: the first word
// at the WITH's parenthesis depth that starts a query or DML statement.
type withMachine struct {
	active bool
	main   bool
	depth  int
}

func (s *scanner) withStep(w kw) {
	st := &s.st
	var k Kind
	switch w {
	case kwSelect, kwValues, kwTable:
		k = KindSelect
	case kwUpdate:
		k = KindUpdate
	case kwDelete:
		k = KindDelete
	case kwInsert:
		k = KindInsert
	case kwReplace:
		k = KindReplace
	default:
		return
	}
	if st.with.main {
		st.kind = k
	}
	st.with.active = false
}

// flushMachine finds WITH READ LOCK or FOR EXPORT after FLUSH TABLES.
type flushMachine struct {
	state uint8 // 0 off, 1 in the table list, 2 WITH, 3 WITH READ, 4 FOR
	main  bool
	depth int
}

func (s *scanner) flushStep(t token, w kw) {
	st := &s.st
	m := &st.flush
	if t.kind != tWord || st.depth != m.depth {
		m.state = 1
		return
	}
	match := false
	switch {
	case w == kwWith:
		m.state = 2
	case w == kwFor:
		m.state = 4
	case m.state == 2 && w == kwRead:
		m.state = 3
	case m.state == 3 && w == kwLock, m.state == 4 && w == kwExport:
		match = true
	default:
		m.state = 1
	}
	if match {
		s.info.Features |= FeatLockTables
		if m.main {
			st.kind = KindLockTables
		}
		m.state = 0
	}
}

// setMachine follows the assignment list of a SET statement.
type setMachine struct {
	active bool
	main   bool // the SET is the statement's head (SET STATEMENT's inner kind counts)
	stmt   bool // SET STATEMENT ... FOR: assignments last one statement
	expect bool // the next token starts an assignment
	first  bool // ... the first one
	scoped bool // a GLOBAL/SESSION/LOCAL/PERSIST/PERSIST_ONLY keyword was seen
	global bool // the latest scope keyword is GLOBAL, PERSIST or PERSIST_ONLY
	depth  int
}

func (m *setMachine) scope() Feature {
	if m.global {
		return FeatSetGlobal
	}
	return FeatSetSession
}

func (s *scanner) setStep(t token, w kw) {
	st := &s.st
	m := &st.set
	f := &s.info.Features
	if !m.expect {
		if st.depth != m.depth {
			return
		}
		if t.is(',') {
			m.expect = true
		} else if m.stmt && w == kwFor {
			m.active = false
			st.subHead, st.subMain = true, m.main
		}
		return
	}
	m.expect = false
	first := m.first
	m.first = false
	switch t.kind {
	case tUserVar:
		*f |= FeatUserVarAssign
	case tSysVar:
		if !m.stmt {
			*f |= sysVarScope(s.lx.src[t.start+2 : t.end])
		}
		// (its kind was noted in step)
	case tQuoted:
		if !m.stmt {
			*f |= m.scope()
		}
		s.info.Vars |= varKindOf(s.lx.src[t.start:t.end])
	case tWord:
		switch w {
		case kwGlobal, kwPersist, kwPersistOnly, kwSession, kwLocal:
			m.scoped = true
			m.global = w == kwGlobal || w == kwPersist || w == kwPersistOnly
			m.expect, m.first = true, first
			return
		case kwTransaction:
			if m.scoped {
				*f |= m.scope()
			} else {
				*f |= FeatSetTransaction
			}
			m.active = false
			return
		case kwPassword, kwRole, kwDefault, kwResource:
			// SET PASSWORD, SET [DEFAULT] ROLE, SET RESOURCE GROUP: not
			// variable assignments; left without a SET feature (unparsed).
			if first && !m.scoped {
				m.active = false
				return
			}
		case kwStatement:
			if first && !m.scoped && !m.stmt {
				p := s.lx
				if n := p.next(); !n.is('=') && n.kind != tAssign {
					*f |= FeatSetStatement
					m.stmt, m.expect = true, true
					return
				}
			}
		case kwNames, kwCharset, kwCharacter:
			if !m.stmt {
				*f |= FeatSetSession
				if w == kwNames {
					*f |= FeatSetNames
				}
			}
			return
		}
		if !m.stmt {
			*f |= m.scope()
		}
		s.info.Vars |= varKindOf(s.lx.src[t.start:t.end])
	}
}

// sysVarScope returns the feature of assigning @@name, name being the text
// after "@@".
func sysVarScope(name []byte) Feature {
	dot := bytes.IndexByte(name, '.')
	if dot < 0 {
		for _, v := range txVars {
			if eqFold(name, v) {
				return FeatSetSession | FeatSetTransaction
			}
		}
		return FeatSetSession
	}
	switch lookupKW(name[:dot]) {
	case kwGlobal, kwPersist, kwPersistOnly:
		return FeatSetGlobal
	}
	return FeatSetSession
}

// txVars are the variables MySQL applies to the next transaction only when
// set as @@name without a scope.
var txVars = [...]string{"transaction_isolation", "tx_isolation", "transaction_read_only", "tx_read_only"}

// eqFold reports whether b equals the lower-case ASCII s, ignoring case.
func eqFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i, c := range b {
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != s[i] {
			return false
		}
	}
	return true
}
