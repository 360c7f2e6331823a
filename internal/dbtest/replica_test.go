package dbtest

import "testing"

func TestReplicaPairStarts(t *testing.T) {
	p, r := StartReplicaPair(t)
	pdb, rdb := p.Open(""), r.Open("")
	defer pdb.Close()
	defer rdb.Close()
	if _, err := pdb.Exec("CREATE DATABASE rp; CREATE TABLE rp.t (id INT PRIMARY KEY); INSERT INTO rp.t VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	var gtid string
	if err := pdb.QueryRow("SELECT @@gtid_binlog_pos").Scan(&gtid); err != nil {
		t.Fatal(err)
	}
	var ok int
	if err := rdb.QueryRow("SELECT MASTER_GTID_WAIT(?, 10)", gtid).Scan(&ok); err != nil || ok != 0 {
		t.Fatalf("wait: %d %v", ok, err)
	}
	var n int
	if err := rdb.QueryRow("SELECT COUNT(*) FROM rp.t").Scan(&n); err != nil || n != 1 {
		t.Fatalf("replica has %d rows, %v", n, err)
	}
}
