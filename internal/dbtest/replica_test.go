package dbtest

import (
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
)

func TestReplicaPairStarts(t *testing.T) {
	p, r := StartReplicaPair(t)
	pdb, rdb := p.Open(""), r.Open("")
	defer pdb.Close()
	defer rdb.Close()
	if _, err := pdb.Exec("CREATE DATABASE rp; CREATE TABLE rp.t (id INT PRIMARY KEY); INSERT INTO rp.t VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	if err := CaughtUp(t.Context(), pdb, rdb, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := rdb.QueryRow("SELECT COUNT(*) FROM rp.t").Scan(&n); err != nil || n != 1 {
		t.Fatalf("replica has %d rows, %v", n, err)
	}
}

// Switchover leaves the replica the primary and the former primary its
// replica: a write on the new primary reaches the old one, and the old one
// refuses an ordinary account's writes.
func TestSwitchover(t *testing.T) {
	p, r := StartReplicaPair(t)
	pdb, rdb := p.Open(""), r.Open("")
	defer pdb.Close()
	defer rdb.Close()
	for _, q := range []string{"CREATE DATABASE sw", "CREATE TABLE sw.t (id INT PRIMARY KEY)", "INSERT INTO sw.t VALUES (1)",
		"CREATE USER app IDENTIFIED BY 'app'", "GRANT INSERT, SELECT ON sw.* TO app"} {
		if _, err := pdb.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	moved := false
	st, err := Switchover(t.Context(), p, r, func() { moved = true })
	if err != nil {
		t.Fatal(err)
	}
	if !moved || st.Moved.Before(st.Repointed) || st.Promoted.Before(st.CaughtUp) {
		t.Fatalf("steps %+v, moved %v", st, moved)
	}
	if _, err := rdb.Exec("INSERT INTO sw.t VALUES (2)"); err != nil {
		t.Fatal(err)
	}
	if err := CaughtUp(t.Context(), rdb, pdb, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := pdb.QueryRow("SELECT COUNT(*) FROM sw.t").Scan(&n); err != nil || n != 2 {
		t.Fatalf("the old primary has %d rows, %v; want 2", n, err)
	}
	app, err := sql.Open("mysql", "app:app@tcp("+p.Addr+")/sw")
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close()
	var me *mysql.MySQLError
	if _, err := app.Exec("INSERT INTO t VALUES (3)"); !errors.As(err, &me) || me.Number != 1290 {
		t.Fatalf("an ordinary account's write on the old primary: %v, want 1290", err)
	}
}

// A replica promoted after its primary was killed keeps every transaction
// it had received: PromoteApplied lets the SQL thread apply the relay log
// before RESET SLAVE ALL throws it away. The replica is delayed here
// (MASTER_DELAY) so that its relay log surely holds transactions not yet
// applied when the primary dies.
func TestPromoteAppliedKeepsTheRelayLog(t *testing.T) {
	p, r := StartReplicaPair(t)
	pdb, rdb := p.Open(""), r.Open("")
	defer pdb.Close()
	defer rdb.Close()
	if _, err := pdb.Exec("CREATE DATABASE pa; CREATE TABLE pa.t (id INT PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	if err := CaughtUp(t.Context(), pdb, rdb, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := rdb.Exec("STOP SLAVE; CHANGE MASTER TO MASTER_DELAY = 2; START SLAVE"); err != nil {
		t.Fatal(err)
	}
	const n = 20
	for i := range n {
		if _, err := pdb.Exec("INSERT INTO pa.t VALUES (?)", i); err != nil {
			t.Fatal(err)
		}
	}
	var pos string
	if err := pdb.QueryRow("SELECT @@gtid_binlog_pos").Scan(&pos); err != nil {
		t.Fatal(err)
	}
	// Until the replica has received all of it (its IO thread runs).
	conn, err := rdb.Conn(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for deadline := time.Now().Add(10 * time.Second); ; {
		io, err := slaveStatusField(t.Context(), conn, "Gtid_IO_Pos")
		if err != nil {
			t.Fatal(err)
		}
		if io == pos {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the replica received up to %q, the primary wrote %q", io, pos)
		}
		time.Sleep(20 * time.Millisecond)
	}
	p.Kill()
	if _, err := r.PromoteApplied(t.Context(), 10*time.Second); err != nil {
		t.Fatal(err)
	}
	var rows int
	if err := rdb.QueryRow("SELECT COUNT(*) FROM pa.t").Scan(&rows); err != nil || rows != n {
		t.Fatalf("the promoted replica has %d of the %d rows the primary acknowledged (%v)", rows, n, err)
	}
	if _, err := rdb.Exec("INSERT INTO pa.t VALUES (?)", n); err != nil {
		t.Fatalf("the promoted replica takes no write: %v", err)
	}
}

// A pair started with SemiSyncArgs replicates semi-synchronously: the
// primary's commits wait for the replica's acknowledgement.
func TestSemiSyncPair(t *testing.T) {
	p, r := StartReplicaPair(t, SemiSyncArgs...)
	pdb, rdb := p.Open(""), r.Open("")
	defer pdb.Close()
	defer rdb.Close()
	// The replica's IO thread registers as a semi-sync client shortly
	// after it connects.
	for deadline := time.Now().Add(10 * time.Second); ; {
		n, err := GlobalStatus(t.Context(), pdb, "Rpl_semi_sync_master_clients")
		if err != nil {
			t.Fatal(err)
		}
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d semi-sync replicas connected, want 1", n)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := pdb.Exec("CREATE DATABASE ss; CREATE TABLE ss.t (id INT PRIMARY KEY); INSERT INTO ss.t VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	if n, err := GlobalStatus(t.Context(), pdb, "Rpl_semi_sync_master_yes_tx"); err != nil || n < 1 {
		t.Fatalf("%d transactions acknowledged by the replica, want some (%v)", n, err)
	}
}
