package varstate

import (
	"strings"

	"github.com/holdfast-db/holdfast/attribution"
	"github.com/holdfast-db/holdfast/proxy/mysqlwire"
)

// Session-state tracking entry types (OK packet, CLIENT_SESSION_TRACK).
const (
	TrackSystemVariables = 0x00
	TrackSchema          = 0x01
	TrackStateChange     = 0x02
)

// AppendStateEntry appends one session state entry: its type and its
// length-encoded data.
func AppendStateEntry(b []byte, typ byte, data []byte) []byte {
	return mysqlwire.AppendLenEncString(append(b, typ), data)
}

// Report is what one statement's response reported about the
// session: its OK packets' session state information and the status flags
// of its OK and EOF packets.
type Report struct {
	Vars      []Change // restored variables reported changed (class Restore, and Kept until taken out)
	Schema    string
	SchemaSet bool // Schema was reported
	Changed   bool // the server said session state changed
	// EOFChanged: an EOF packet said session state changed. An EOF carries
	// no tracker data (holdfast's backend connections do not negotiate
	// DEPRECATE_EOF): MariaDB reports the variables with the next OK that
	// reports a change of its own.
	EOFChanged bool
	LastGTID   string // last_gtid reported (class Record)
	// KeptSet: the statement set variables holdfast keeps for the client
	// (class Kept), taken out of Vars and handled by the caller.
	KeptSet bool
	// Pin is the pin reason a reported variable implies (class Pin), and
	// PinVar names that variable.
	Pin    string
	PinVar string
}

// NoteEOFChange notes an EOF packet whose status says the session state
// changed (SERVER_SESSION_STATE_CHANGED).
func (sc *Report) NoteEOFChange() {
	sc.Changed, sc.EOFChanged = true, true
}

// Class is what holdfast does with a system variable the backend's
// session tracker reports changed. Backend connections track every
// variable (session_track_system_variables = '*'), so the class decides
// which client state moves between connections and which must not:
//
//   - Restore (every variable not named below): the client's value,
//     read back from the connection after a change and set on every
//     connection the session uses next (RestoreSQL);
//   - Kept: holdfast keeps the client's value itself and never puts
//     it on a pooled connection (kept.go): wait_timeout,
//     interactive_timeout and the session_track_* settings;
//   - Record: a read-only value the server changes: last_gtid, the
//     GTID of the client's last commit on a server with binary logging
//     on, reported with every commit's OK. It is recorded per client
//     (session.lastGTID, what read-your-writes needs) and never set on a
//     connection: SET last_gtid fails (1238, read-only variable);
//   - Pin: a value that acts once or cannot be read back exactly, so
//     moving it would be wrong. insert_id and gtid_seq_no are consumed by
//     the next INSERT or the next GTID; last_insert_id (and its alias
//     identity) is what LAST_INSERT_ID() returns until the connection's
//     next INSERT changes it; timestamp set back to DEFAULT reads back as
//     the running clock, which no SET can reproduce; rand_seed1 and
//     rand_seed2 read back as 0. The session keeps its connection
//     (session_state). session_track_transaction_info pins too
//     (session_track): only the backend can report transaction state.
//
// A SET STATEMENT ... FOR statement reports its variables though they are
// back to their values when it ends: those reports are dropped whatever
// their class (see statementScoped).
type Class uint8

const (
	Restore Class = iota
	Kept
	Record
	Pin
)

func Classify(name string) Class {
	switch name {
	case "last_gtid":
		return Record
	case "insert_id", "gtid_seq_no", "last_insert_id", "identity", "timestamp", "rand_seed1", "rand_seed2",
		"session_track_transaction_info":
		return Pin
	}
	if IsKept(name) {
		return Kept
	}
	return Restore
}

// AddStateInfo decodes session state information from an OK packet and
// adds it to sc, each variable as its class says (see Class). It reports
// false when info is malformed.
func (sc *Report) AddStateInfo(info []byte) bool {
	for len(info) > 0 {
		typ := info[0]
		data, n, ok := mysqlwire.ReadLenEncString(info[1:])
		if !ok {
			return false
		}
		info = info[1+n:]
		switch typ {
		case TrackSystemVariables:
			name, k, ok := mysqlwire.ReadLenEncString(data)
			if !ok {
				return false
			}
			val, _, ok := mysqlwire.ReadLenEncString(data[k:])
			if !ok {
				return false
			}
			lname := strings.ToLower(string(name))
			switch Classify(lname) {
			case Record:
				sc.LastGTID = string(val)
			case Pin:
				sc.Pin, sc.PinVar = attribution.PinSessionState, lname
				if lname == "session_track_transaction_info" {
					sc.Pin = attribution.PinSessionTrack
				}
			default: // restored and kept: kept ones are taken out by keptChanged
				sc.Vars = append(sc.Vars, Change{Name: lname, Value: string(val)})
			}
		case TrackSchema:
			name, _, ok := mysqlwire.ReadLenEncString(data)
			if !ok {
				return false
			}
			sc.Schema, sc.SchemaSet = string(name), true
		case TrackStateChange:
			sc.Changed = true
		}
	}
	return true
}
