package varstate

import (
	"maps"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/holdfast-db/holdfast/proxy/mysqlwire"
)

// These tests need no database: a small model of how MariaDB applies SET
// to the character-set variables checks that restoreAssignments moves a
// connection to exactly the wanted state. (The proxy's stress test,
// TestSessionVariablesStress, checks the same against a real server.)

// simCharsets: character set -> its default collation; simCollations:
// collation -> its character set.
var (
	simCharsets   = map[string]string{"utf8mb4": "utf8mb4_general_ci", "latin1": "latin1_swedish_ci", "cp1251": "cp1251_general_ci", "koi8r": "koi8r_general_ci", "utf8mb3": "utf8mb3_general_ci"}
	simCollations = map[string]string{"utf8mb4_general_ci": "utf8mb4", "utf8mb4_bin": "utf8mb4", "utf8mb4_unicode_ci": "utf8mb4",
		"latin1_swedish_ci": "latin1", "latin1_bin": "latin1", "cp1251_general_ci": "cp1251", "cp1251_bin": "cp1251",
		"koi8r_general_ci": "koi8r", "utf8mb3_general_ci": "utf8mb3", "utf8mb3_bin": "utf8mb3"}
)

// simApply applies one assignment to a session's variables as MariaDB
// does; global holds what DEFAULT gives.
func simApply(vals map[string]string, a assignment, global map[string]string) {
	switch {
	case a.names:
		vals["character_set_client"], vals["character_set_connection"], vals["character_set_results"] = a.value, a.value, a.value
		vals["collation_connection"], vals[ResultsCollation] = a.collate, a.collate
	case a.dflt:
		if g, ok := global[a.name]; ok {
			vals[a.name] = g
		} else {
			delete(vals, a.name)
		}
	case a.name == "character_set_results":
		vals[a.name], vals[ResultsCollation] = a.value, simCharsets[a.value]
	case a.name == "character_set_connection":
		vals[a.name], vals["collation_connection"] = a.value, simCharsets[a.value]
	case a.name == "collation_connection":
		vals[a.name], vals["character_set_connection"] = a.value, simCollations[a.value]
	default:
		vals[a.name] = a.value
	}
}

func simBase() map[string]string {
	return map[string]string{"character_set_client": "utf8mb4", "character_set_connection": "utf8mb4", "character_set_results": "utf8mb4",
		"collation_connection": "utf8mb4_general_ci", ResultsCollation: "utf8mb4_general_ci", "sql_mode": "STRICT_TRANS_TABLES"}
}

// simClientSet is a random SET a client might run.
func simClientSet(r *rand.Rand) assignment {
	charsets := []string{"utf8mb4", "latin1", "cp1251", "koi8r", "utf8mb3"}
	colls := []string{"utf8mb4_general_ci", "utf8mb4_bin", "utf8mb4_unicode_ci", "latin1_swedish_ci", "latin1_bin", "cp1251_general_ci", "cp1251_bin", "utf8mb3_bin"}
	cs := charsets[r.IntN(len(charsets))]
	switch r.IntN(7) {
	case 0:
		coll := simCharsets[cs]
		if r.IntN(2) == 0 {
			for _, c := range colls {
				if simCollations[c] == cs {
					coll = c
				}
			}
		}
		return assignment{names: true, value: cs, collate: coll}
	case 1:
		return assignment{name: "character_set_results", value: cs}
	case 2:
		return assignment{name: "character_set_client", value: cs}
	case 3:
		return assignment{name: "character_set_connection", value: cs}
	case 4:
		return assignment{name: "collation_connection", value: colls[r.IntN(len(colls))]}
	case 5:
		return assignment{name: "time_zone", value: []string{"+00:00", "+05:30", "SYSTEM"}[r.IntN(3)]}
	default:
		return assignment{name: "sql_mode", value: []string{"", "ANSI_QUOTES", "STRICT_TRANS_TABLES"}[r.IntN(3)]}
	}
}

func TestRestoreAssignmentsMoveExactlyToWant(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	global := simBase()
	for i := 0; i < 20000; i++ {
		want, have := simBase(), simBase()
		for j := r.IntN(4); j > 0; j-- {
			simApply(want, simClientSet(r), global)
		}
		for j := r.IntN(4); j > 0; j-- {
			simApply(have, simClientSet(r), global)
		}
		if r.IntN(4) == 0 {
			delete(want, "time_zone") // never set by this client: DEFAULT
		}
		got := maps.Clone(have)
		as := restoreAssignments(&State{vals: want}, &State{vals: have})
		for _, a := range as {
			simApply(got, a, global)
		}
		if !maps.Equal(got, want) {
			t.Fatalf("case %d: from %v to %v: %s gives %v", i, have, want, RestoreSQL(&State{vals: want}, &State{vals: have}), got)
		}
	}
}

func TestRestoreSQLOneVariableAlone(t *testing.T) {
	// The case that once came out wrong: only character_set_results
	// differs, and SET NAMES (which the results' collation needs) moves
	// the client and connection character sets too.
	have := simBase()
	want := simBase()
	simApply(want, assignment{name: "character_set_results", value: "cp1251"}, nil)
	sql := RestoreSQL(&State{vals: want}, &State{vals: have})
	wantSQL := "SET NAMES 'cp1251' COLLATE 'cp1251_general_ci', SESSION character_set_client = 'utf8mb4', " +
		"character_set_connection = 'utf8mb4', collation_connection = 'utf8mb4_general_ci'"
	if sql != wantSQL {
		t.Fatalf("restoreSQL:\n got %s\nwant %s", sql, wantSQL)
	}
	if sql := RestoreSQL(&State{vals: have}, &State{vals: have}); sql != "" {
		t.Fatalf("equal states: %q, want none", sql)
	}
	delete(want, "sql_mode")
	if sql := RestoreSQL(&State{vals: want}, &State{vals: want}); sql != "" || !strings.Contains(RestoreSQL(&State{vals: want}, &State{vals: have}), "sql_mode = DEFAULT") {
		t.Fatalf("a variable the session never set goes back to DEFAULT: %q", RestoreSQL(&State{vals: want}, &State{vals: have}))
	}
}

func TestClassifyTracked(t *testing.T) {
	for name, want := range map[string]Class{
		"last_gtid": Record, "time_zone": Restore, "character_set_results": Restore, "sql_mode": Restore,
		"wait_timeout": Kept, "session_track_system_variables": Kept, "insert_id": Pin,
		"last_insert_id": Pin, "timestamp": Pin, "gtid_seq_no": Pin, "rand_seed1": Pin,
		"session_track_transaction_info": Pin,
	} {
		if got := Classify(name); got != want {
			t.Errorf("Classify(%q) = %d, want %d", name, got, want)
		}
	}
	var sc Report
	info := AppendStateEntry(nil, TrackSystemVariables, mysqlwire.AppendLenEncString(mysqlwire.AppendLenEncString(nil, []byte("last_gtid")), []byte("0-1-7")))
	info = AppendStateEntry(info, TrackSystemVariables, mysqlwire.AppendLenEncString(mysqlwire.AppendLenEncString(nil, []byte("time_zone")), []byte("+01:00")))
	if !sc.AddStateInfo(info) || sc.LastGTID != "0-1-7" || len(sc.Vars) != 1 || sc.Vars[0].Name != "time_zone" || sc.Pin != "" {
		t.Fatalf("AddStateInfo: %+v", sc)
	}
}
