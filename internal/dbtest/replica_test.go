package dbtest

import (
	"testing"
	"time"
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
