// Package sessionstate is a client session's state as holdfast keeps it
// between statements: what the client set (its variables, database,
// multi-statement option), what holdfast keeps for it (the kept
// variables, the status flags, its last insert id and row count), its
// transaction as holdfast sees it, its read-your-writes positions and
// what ties it to its connection (a pin, SET TRANSACTION). And what a
// statement's answer does to that state (After): read back what the
// server's session tracker reported changed, set holdfast's own values
// back on the connection, decide a pin, ask for the transaction state an
// error hid.
//
// The state talks to the backend connection a statement ran on through
// Conn, two methods, so it is tested with a fake connection and no
// database. It knows nothing of pools, leases, sockets or other sessions:
// the session (package proxy) owns the State, calls After after each
// statement, and acts on the Effects (give the connection back closed,
// count a pin, note the connection's new state). A State is the session
// goroutine's: nothing in it is safe for concurrent use.
package sessionstate

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/holdfast-db/holdfast/attribution"
	"github.com/holdfast-db/holdfast/proxy/mysqlwire"
	"github.com/holdfast-db/holdfast/proxy/policy"
	"github.com/holdfast-db/holdfast/proxy/sqlscan"
	"github.com/holdfast-db/holdfast/proxy/varstate"
)

// Conn is the backend connection a statement ran on, as the state needs
// it. The caller bounds each call in time.
type Conn interface {
	// Exchange sends sql as a COM_QUERY and returns the rows of its
	// answer as text (a NULL is nil). A server error is a
	// *mysqlwire.SQLError and leaves the connection usable; any other
	// error means it is broken.
	Exchange(sql string) (rows [][][]byte, err error)
	// PingStatus sends COM_PING and returns the status flags of its OK.
	PingStatus() (uint16, error)
}

// Status are the status flags that describe the session rather than one
// statement's response (index use, cursors, rows sent, state changes):
// what holdfast keeps between statements and puts in OKs it makes itself.
const Status = mysqlwire.StatusInTrans | mysqlwire.StatusAutocommit | mysqlwire.StatusNoBackslash | mysqlwire.StatusInTransRO

// Txn is the client's transaction as holdfast sees it.
type Txn struct {
	// Tag is the tag of the open transaction's first tagged statement
	// (nil: none); Raw that statement's tag as it carried it, when
	// accounting folded it into other ("" otherwise).
	Tag *attribution.Tag
	Raw string
	// PendingBegin is a BEGIN answered and not yet sent (the COM_QUERY to
	// send), nil when none.
	PendingBegin []byte
	// SentBegin is the deferred BEGIN that went out, while nothing but
	// prepares has run in its transaction since (nil otherwise): the
	// transaction has done nothing, and may start again on another
	// connection (a former primary's, see proxy/failover.go).
	SentBegin []byte
	// BeginInFlight: the deferred BEGIN went out ahead of the statement
	// just written, and its OK is still to be read.
	BeginInFlight bool
	// HoldNext: SET TRANSACTION keeps the connection through the next
	// statement.
	HoldNext bool
}

// State is one client session's state. The zero State is a session whose
// variables are not known yet; New gives a fresh one.
type State struct {
	// Vars is the client's session variables (nil until the backend's
	// defaults are known), DB its database, MultiStmts its
	// multi-statement option: restored on whichever connection serves it.
	Vars       *varstate.State
	DB         string
	MultiStmts bool
	// Kept is the client's value of the variables holdfast keeps itself
	// (nil until the backend's defaults are known); set it with SetKept.
	Kept *varstate.KeptVars
	// Interactive: CLIENT_INTERACTIVE, so interactive_timeout applies.
	Interactive bool
	// PinReason is non-empty when the session keeps its connection for
	// good, and says why.
	PinReason string
	// Status is the status flags as the client last saw them (of Status).
	Status uint16
	// LastInsertID is the insert id of the client's last OK; RowCount what
	// ROW_COUNT() answers after its last statement (its OK's affected
	// rows, -1 after a result set or an error).
	LastInsertID uint64
	RowCount     int64
	// Txn is its transaction.
	Txn Txn
	// Writes is the GTID position of the session's commits (the last
	// sequence number per domain; nil: none); WritesUnplaced: one could
	// not be read, so its reads under the replica policy stay on the
	// primary. RYWAfter is when its last CALL holdfast.* ended (zero:
	// none since every replica had it): the engine's commits are not the
	// session's, so until a replica has what the primary had then, the
	// session's reads under the replica policy avoid it.
	Writes         map[uint32]uint64
	WritesUnplaced bool
	RYWAfter       time.Time

	// onKept is told of every change of Kept (nil: nobody).
	onKept func(*varstate.KeptVars)
}

// New is a fresh session's state: in database db, with multi-statements
// as the client asked, autocommit on, and the kept variables kept (nil
// until the backend is known). onKept is told of every later change of
// the kept variables (the session's idle limit follows wait_timeout).
func New(db string, multiStmts, interactive bool, kept *varstate.KeptVars, onKept func(*varstate.KeptVars)) State {
	return State{DB: db, MultiStmts: multiStmts, Interactive: interactive, Status: mysqlwire.StatusAutocommit, Kept: kept, onKept: onKept}
}

// SetKept makes k the client's kept variables.
func (st *State) SetKept(k *varstate.KeptVars) {
	st.Kept = k
	if st.onKept != nil {
		st.onKept(k)
	}
}

// Reset is COM_RESET_CONNECTION: a fresh session on the same login, with
// the kept variables kept and the multi-statement option multiStmts.
func (st *State) Reset(multiStmts bool, kept *varstate.KeptVars) {
	*st = State{DB: st.DB, MultiStmts: multiStmts, Interactive: st.Interactive, Status: mysqlwire.StatusAutocommit,
		Writes: st.Writes, WritesUnplaced: st.WritesUnplaced, RYWAfter: st.RYWAfter, onKept: st.onKept}
	st.SetKept(kept)
}

// InTxn reports whether a transaction is open as the client sees it (a
// deferred BEGIN included).
func (st *State) InTxn() bool { return st.Status&mysqlwire.StatusInTrans != 0 }

// KeepsConn reports whether the session keeps its backend connection
// between statements: inside a transaction, pinned by session state, or
// through the next statement after SET TRANSACTION.
func (st *State) KeepsConn() bool {
	return st.InTxn() || st.PinReason != "" || st.Txn.HoldNext
}

// View is what policy sees of the state; holding says whether the
// session holds a connection now.
func (st *State) View(holding bool) policy.Session {
	return policy.Session{
		InTxn:          st.InTxn(),
		PendingBegin:   st.Txn.PendingBegin != nil,
		FreshTxn:       st.Txn.SentBegin != nil,
		Holding:        holding,
		Pinned:         st.PinReason != "",
		HoldNext:       st.Txn.HoldNext,
		VarsKnown:      st.Vars != nil,
		Autocommit:     st.Status&mysqlwire.StatusAutocommit != 0,
		WritesUnplaced: st.WritesUnplaced,
	}
}

// NoteWrite records a commit of the session's at GTID (domain, seq), so
// that its reads under the replica policy wait for it; ok false: the GTID
// could not be read.
func (st *State) NoteWrite(domain uint32, seq uint64, ok bool) {
	if !ok {
		st.WritesUnplaced = true
		return
	}
	if st.Writes == nil {
		st.Writes = map[uint32]uint64{}
	}
	st.Writes[domain] = max(st.Writes[domain], seq)
}

// KeptSQL returns the SET that gives a connection with holdfast's kept
// values hf the client's, for a statement that reads them, and the SET
// that puts hf back after it ("" and "" when they are the same, or
// nothing is known yet).
func (st *State) KeptSQL(hf map[string]string) (before, after string) {
	if st.Kept == nil || len(hf) == 0 {
		return "", ""
	}
	before = varstate.KeptSQL(st.Kept.Values(), hf, nil)
	if before == "" {
		return "", ""
	}
	return before, varstate.KeptSQL(hf, st.Kept.Values(), nil)
}

// KeptKey is key, a backend statement cache key, for a statement that
// reads the kept variables: with the client's values of them, which
// decide the statement's columns (a variable's length).
func (st *State) KeptKey(key string) string {
	if st.Kept == nil {
		return key
	}
	var b strings.Builder
	b.WriteString(key)
	for _, n := range varstate.KeptNames {
		b.WriteByte(0)
		b.WriteString(st.Kept.Get(n))
	}
	return b.String()
}

// SyncKept reads the kept variables back from c after a statement that
// may have set them, and sets c back to holdfast's values hf. The values
// read of the variables the statement assigns (assigned, from its text)
// are the client's now; when the text is no plain SET (assigned nil),
// every value that differs from holdfast's is taken as the client's.
func (st *State) SyncKept(c Conn, hf map[string]string, assigned []string) error {
	if st.Kept == nil || len(hf) == 0 {
		return nil
	}
	rows, err := c.Exchange(varstate.SelectKept("session") + " LIMIT 1")
	if err != nil {
		return err
	}
	if len(rows) != 1 || len(rows[0]) != len(varstate.KeptNames) {
		return fmt.Errorf("sessionstate: reading back %d session variables got %d rows", len(varstate.KeptNames), len(rows))
	}
	have := map[string]string{}
	var changes []varstate.Change
	for i, n := range varstate.KeptNames {
		v := string(rows[0][i])
		have[n] = v
		if assigned == nil && v != hf[n] || slices.Contains(assigned, n) {
			changes = append(changes, varstate.Change{Name: n, Value: v})
		}
	}
	if len(changes) > 0 {
		st.SetKept(st.Kept.With(changes))
	}
	if sql := varstate.KeptSQL(hf, have, nil); sql != "" {
		_, err = c.Exchange(sql)
	}
	return err
}

// keptChanged takes the kept variables out of changes (the session
// tracker's report, read back): they become the client's values, and c
// goes back to holdfast's values at once.
func (st *State) keptChanged(c Conn, base *varstate.Base, changes []varstate.Change) ([]varstate.Change, error) {
	var kept []varstate.Change
	rest := changes[:0:0]
	for _, ch := range changes {
		if varstate.IsKept(ch.Name) {
			kept = append(kept, ch)
		} else {
			rest = append(rest, ch)
		}
	}
	if len(kept) == 0 {
		return changes, nil
	}
	if st.Kept == nil && base != nil {
		st.SetKept(base.Kept)
	}
	if st.Kept != nil {
		st.SetKept(st.Kept.With(kept))
	}
	names := make([]string, len(kept))
	have := map[string]string{}
	for i, ch := range kept {
		names[i] = ch.Name
		have[ch.Name] = ch.Value
	}
	if base != nil && len(base.Holdfast) != 0 {
		if sql := varstate.KeptSQL(base.Holdfast, have, names); sql != "" {
			if _, err := c.Exchange(sql); err != nil {
				return rest, err
			}
		}
	}
	return rest, nil
}

// Answer is what relaying a statement's response learned.
type Answer struct {
	// Info is the statement's scan (nil: a command without one).
	Info     *sqlscan.Info
	Status   uint16 // the status flags of its last OK or EOF
	InsertID uint64 // the last non-zero insert id it reported
	Failed   bool   // an ERR packet ended it
	Cursor   bool   // it left a cursor open
	// Report is what its OK and EOF packets said of the session; After
	// changes it (what it read back replaces what the tracker said).
	Report *varstate.Report
}

// Effects is what After did that the session acts on.
type Effects struct {
	// Broken: the connection is in a state holdfast does not know (an
	// exchange failed): give it back closed. After stopped there (the
	// fields below say what it did until then).
	Broken bool
	// Vars: the connection has the session's variables (st.Vars) now;
	// Schema: its database is st.DB.
	Vars, Schema bool
	// Pinned is the reason the statement pinned the session ("": it did
	// not), for the caller to count.
	Pinned string
	// LastGTID is the GTID of a commit the statement made ("": none).
	LastGTID string
	// Warning is a failure After went on after (a read-back the server
	// refused: the session is pinned instead), for the log.
	Warning error
}

// After records what a statement did to the session, given its answer a
// and the connection c it ran on (and holds still), and the backend's
// base (nil until known: holdfast's kept values, collations). It reads
// back, in up to four exchanges, what the answer reported but did not
// say exactly: the variables the tracker reported changed, the kept ones
// among them (set back to holdfast's at once), a tracker report a result
// set could not carry, and whether a failed statement opened a
// transaction with autocommit off. err is the exchange that failed
// (Effects.Broken).
func (st *State) After(c Conn, base *varstate.Base, a *Answer) (eff Effects, err error) {
	info, sc := a.Info, a.Report
	st.Status = a.Status & Status
	if a.InsertID != 0 {
		st.LastInsertID = a.InsertID
	}
	eff.LastGTID = sc.LastGTID
	if policy.StatementScoped(info) {
		// SET STATEMENT ... FOR: its variables are back to their values
		// now, whatever the tracker says.
		sc.Vars, sc.Pin, sc.PinVar = sc.Vars[:0], "", ""
	}
	if sc.EOFChanged && !policy.MayChangeState(info) {
		// A result set's EOF said the state changed, but the statement
		// cannot have changed it for good: SET STATEMENT's variables are
		// back, and a prepared statement run in another database than it
		// was prepared in switches the database for its run only. The
		// tracker holds the report the EOF could not carry; take it off
		// the connection now, or the next statement to report a change
		// there (another client's, maybe) would be told of it.
		if _, err := c.Exchange(FlushTrackerSQL); err != nil {
			eff.Broken = true
			return eff, fmt.Errorf("sessionstate: could not clear the session tracker after a result set: %w", err)
		}
	}
	if len(sc.Vars) > 0 {
		if err := readBackVars(c, sc); err != nil {
			err = fmt.Errorf("sessionstate: could not read session variables back after a change: %w", err)
			if isIOError(err) {
				eff.Broken = true
				return eff, err
			}
			eff.Warning = err
			sc.Pin, sc.PinVar = attribution.PinSessionState, "unreadable"
		}
	}
	if len(sc.Vars) > 0 {
		n := len(sc.Vars)
		var err error
		sc.Vars, err = st.keptChanged(c, base, sc.Vars)
		sc.KeptSet = sc.KeptSet || len(sc.Vars) < n
		if err != nil {
			eff.Broken = true
			return eff, fmt.Errorf("sessionstate: could not set holdfast's session settings back after a client changed them: %w", err)
		}
	}
	if len(sc.Vars) > 0 {
		st.noteResultsCollation(sc, info, base)
		st.Vars = st.Vars.With(sc.Vars)
		eff.Vars = true
	}
	if sc.SchemaSet {
		st.DB, eff.Schema = sc.Schema, true
	}
	if st.PinReason == "" {
		if reason := policy.PinReason(info, a.Cursor, sc); reason != "" {
			st.PinReason, eff.Pinned = reason, reason
		}
	}
	st.Txn.HoldNext = info != nil && info.Kind == sqlscan.KindSetTransaction && !a.Failed
	if a.Failed && st.Status&(mysqlwire.StatusInTrans|mysqlwire.StatusAutocommit) == 0 && st.PinReason == "" && !st.Txn.HoldNext {
		// With autocommit off, a failed statement may still have opened a
		// transaction, and its ERR packet does not say. Ask.
		status, err := c.PingStatus()
		if err != nil {
			eff.Broken = true
			return eff, fmt.Errorf("sessionstate: could not ask the transaction state after a failed statement: %w", err)
		}
		st.Status = status & Status
	}
	return eff, nil
}

// FlushTrackerSQL sets a variable to the value it has on every backend
// connection (holdfast tracks state changes there), so that its OK packet
// carries whatever the session tracker still holds.
const FlushTrackerSQL = "SET SESSION session_track_state_change = ON"

func isIOError(err error) bool {
	var se *mysqlwire.SQLError
	return err != nil && !errors.As(err, &se)
}

// noteResultsCollation adds to sc the collation results are now marked
// with (see varstate.ResultsCollation) when the statement changed the
// character set: SET NAMES ... gives the connection collation, any other
// change of character_set_results that character set's default collation.
func (st *State) noteResultsCollation(sc *varstate.Report, info *sqlscan.Info, base *varstate.Base) {
	var results, conn string
	var resultsSet, connSet bool
	for _, c := range sc.Vars {
		switch c.Name {
		case "character_set_results":
			results, resultsSet = c.Value, true
		case "collation_connection":
			conn, connSet = c.Value, true
		}
	}
	switch {
	case info != nil && info.Features&sqlscan.FeatSetNames != 0 && connSet && (resultsSet || conn != st.Vars.Get(varstate.ResultsCollation)):
		sc.Vars = append(sc.Vars, varstate.Change{Name: varstate.ResultsCollation, Value: conn})
	case resultsSet:
		coll := ""
		if base != nil {
			coll = base.DefaultCollation(results)
		}
		sc.Vars = append(sc.Vars, varstate.Change{Name: varstate.ResultsCollation, Value: coll})
	}
}

// readBackVars replaces the values the session tracker reported with the
// values the server now has. The tracker tells which variables changed,
// but MariaDB 10.11 can report a stale value (time_zone after a second SET
// reports the previous zone) and reports SET NAMES ... COLLATE without
// collation_connection; one SELECT on the same connection is exact.
func readBackVars(c Conn, sc *varstate.Report) error {
	names := make([]string, 0, len(sc.Vars)+1)
	seen := map[string]bool{}
	charset := false
	for _, v := range sc.Vars {
		if !seen[v.Name] {
			seen[v.Name] = true
			names = append(names, v.Name)
		}
		if strings.HasPrefix(v.Name, "character_set_") {
			charset = true
		}
	}
	if charset && !seen["collation_connection"] {
		names = append(names, "collation_connection")
	}
	var q strings.Builder
	q.WriteString("SELECT ")
	for i, n := range names {
		if i > 0 {
			q.WriteString(", ")
		}
		q.WriteString("@@session.`")
		q.WriteString(n)
		q.WriteString("`")
	}
	q.WriteString(" LIMIT 1") // an explicit LIMIT overrides sql_select_limit
	rows, err := c.Exchange(q.String())
	if err != nil {
		return err
	}
	if len(rows) != 1 || len(rows[0]) != len(names) {
		return fmt.Errorf("sessionstate: reading back %d session variables got %d rows", len(names), len(rows))
	}
	sc.Vars = sc.Vars[:0]
	for i, n := range names {
		v := rows[0][i]
		val := string(v)
		if v == nil {
			val = varstate.NullValue
		}
		sc.Vars = append(sc.Vars, varstate.Change{Name: n, Value: val})
	}
	return nil
}
