package main

import (
	"database/sql"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/holdfast-db/holdfast/internal/dbtest"
)

// A readonly control set through one instance with holdfastctl holds on
// every instance: within the propagation bound the other refuses the
// tag's writes with 9011 (SQLSTATE 25006), text and prepared, and serves
// its reads and the other tags' writes; /api/controls, holdfastctl
// controls and the status page of the other instance show it, with who
// set it; lifted through the other instance, the tag writes again
// everywhere.
func TestFleetReadOnly(t *testing.T) {
	ms := fleetOf(t, 2)
	if _, err := dbtest.Root(t).Exec("CREATE TABLE `" + ms[0].db + "`.ro (id INT PRIMARY KEY, v INT)"); err != nil {
		t.Fatal(err)
	}
	dbs := []*sql.DB{ms[0].client(t), ms[1].client(t)}
	n := 0
	write := func(db *sql.DB, tag string, prepared bool) error {
		n++
		q := fmt.Sprintf("/* conn_tag:%s */ INSERT INTO ro VALUES (%d, 1)", tag, n)
		if prepared {
			_, err := db.Exec(fmt.Sprintf("/* conn_tag:%s */ INSERT INTO ro VALUES (?, 1)", tag), n)
			return err
		}
		_, err := db.Exec(q)
		return err
	}
	refused := func(err error) bool {
		var me *mysql.MySQLError
		return errors.As(err, &me) && me.Number == 9011 && string(me.SQLState[:]) == "25006"
	}
	for _, db := range dbs {
		if err := write(db, "batch_nightly", false); err != nil {
			t.Fatalf("a write before any control: %v", err)
		}
	}

	ctlBin := dbtest.Command(t, "./cmd/holdfastctl")
	out, err := holdfastctl(t, ctlBin, "-addr", ms[0].admin, "readonly", "batch_*", "-reason", "INC-77", "-by", "alice").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "batch_* is read-only") || !strings.Contains(string(out), "on every holdfast instance") {
		t.Fatalf("holdfastctl readonly: %v\n%s", err, out)
	}
	if err := write(dbs[0], "batch_nightly", false); !refused(err) {
		t.Fatalf("the instance the control was set through: %v, want 9011", err)
	}
	took := within(t, 2*time.Second, "the other instance refuses the read-only tag's writes", func() bool {
		return refused(write(dbs[1], "batch_nightly", false))
	})
	t.Logf("readonly in force on the other instance %v after the change", took.Round(time.Millisecond))
	if err := write(dbs[1], "batch_nightly", true); !refused(err) {
		t.Errorf("a prepared write on the other instance: %v, want 9011", err)
	} else if !strings.Contains(err.Error(), "tag 'batch_nightly' is read-only by on-call under batch_* (INC-77)") {
		t.Errorf("the refusal does not say what and why: %v", err)
	}
	var count int
	// (The other instance wrote until the control reached it.)
	if err := dbs[1].QueryRow("/* conn_tag:batch_nightly */ SELECT COUNT(*) FROM ro").Scan(&count); err != nil || count < 2 {
		t.Errorf("a read of the read-only tag: %d %v, want the rows written before", count, err)
	}
	if err := write(dbs[1], "checkout", false); err != nil {
		t.Errorf("another tag's write: %v", err)
	}

	var ans struct {
		Controls []struct{ Tag, Kind, Shown, SetBy string }
		Here     []struct{ Tag, Kind, Shown, Source, SetBy string }
	}
	dbtest.FetchJSON(t, ms[1].admin+"/api/controls", &ans)
	if len(ans.Controls) != 1 || ans.Controls[0].Kind != "readonly" || ans.Controls[0].Tag != "batch_*" || ans.Controls[0].Shown != "read-only" {
		t.Errorf("/api/controls of the other instance, the fleet's: %+v", ans.Controls)
	}
	if len(ans.Here) != 1 || ans.Here[0].Source != "fleet" || ans.Here[0].Kind != "readonly" {
		t.Errorf("/api/controls of the other instance, in force there: %+v", ans.Here)
	}
	var st struct {
		Here []struct{ Tag, Kind, Shown, Source, Lift string } `json:"controls_here"`
	}
	dbtest.FetchJSON(t, ms[1].admin+"/api/status", &st)
	if len(st.Here) != 1 || st.Here[0].Shown != "read-only" || st.Here[0].Lift != "/api/tags/batch_%2A/readonly" {
		t.Errorf("the status page's controls in force: %+v", st.Here)
	}
	if ans := ms[1].api(t, http.MethodGet, "/api/controls"); !strings.Contains(ans, `"set_by": "harness/alice"`) {
		t.Errorf("the control's author is not recorded as the credential's name: %s", ans)
	}
	out, err = holdfastctl(t, ctlBin, "-addr", ms[1].admin, "controls").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "readonly") || !strings.Contains(string(out), "read-only") {
		t.Errorf("holdfastctl controls through the other instance: %v\n%s", err, out)
	}
	if v, ok := ms[1].metric(t, `holdfast_tag_rejected_total{reason="refused",tag="batch_nightly"}`); !ok || v < 2 {
		t.Errorf("refusals counted on the other instance: %v (%v), want 2 or more", v, ok)
	}

	out, err = holdfastctl(t, ctlBin, "-addr", ms[1].admin, "readonly", "batch_*", "off").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "batch_* may write again") {
		t.Fatalf("holdfastctl readonly off: %v\n%s", err, out)
	}
	for i, db := range dbs {
		within(t, 2*time.Second, fmt.Sprintf("instance %d serves the tag's writes again", i), func() bool { return write(db, "batch_nightly", false) == nil })
	}
}
