package proxy

import (
	"bufio"
	"database/sql"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	gsd "github.com/go-sql-driver/mysql"

	"github.com/holdfast-db/holdfast/internal/dbtest"
	"github.com/holdfast-db/holdfast/internal/holdfastproc"
)

// rowFile generates a LOAD DATA file of n 100-byte lines ("id,pad\n") as
// it is read, so the client keeps none of it.
type rowFile struct {
	next, n int
	line    []byte
	pending []byte
}

func newRowFile(n int) *rowFile { return &rowFile{n: n} }

func (f *rowFile) Read(p []byte) (int, error) {
	w := 0
	for w < len(p) {
		if len(f.pending) == 0 {
			if f.next == f.n {
				break
			}
			f.line = fmt.Appendf(f.line[:0], "%010d,%s\n", f.next, strings.Repeat("x", 88))
			f.pending = f.line
			f.next++
		}
		k := copy(p[w:], f.pending)
		f.pending = f.pending[k:]
		w += k
	}
	if w == 0 {
		return 0, io.EOF
	}
	return w, nil
}

// peakRSS is VmHWM of pid, in bytes.
func peakRSS(t *testing.T, pid int) int64 {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmHWM in /proc/pid/status")
	return 0
}

// TestLoadDataLocalBig (make load-data-big): a 100 MiB LOAD DATA LOCAL
// INFILE through a holdfast process (the binary named by HOLDFAST_BIN)
// leaves holdfast's peak RSS where a 1 MiB load left it, give or take
// 16 MiB: the file streams through in constant memory.
func TestLoadDataLocalBig(t *testing.T) {
	bin := os.Getenv("HOLDFAST_BIN")
	if bin == "" {
		t.Skip("a 100 MiB load through a holdfast process: run `make load-data-big`")
	}
	db := dbtest.NewDatabase(t)
	user := dbtest.NewUser(t, db)
	addr := dbtest.FreeAddr(t)
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "holdfast.yaml")
	dbtest.WriteHoldfastConfig(t, cfgPath, holdfastproc.Config{Listen: addr, Users: []holdfastproc.User{{Name: "app", Password: "app"}},
		Backend: holdfastproc.Backend{User: user, Password: user, Database: db},
		YAML:    "pool:\n  min: 1\n  max: 2\n  max_idle: 2\nlog:\n  level: warn\nreservation:\n  enabled: false\n"})
	h := dbtest.StartHoldfast(t, holdfastproc.Options{Bin: bin, Config: cfgPath, Listen: addr,
		LogPath: filepath.Join(dir, "holdfast.log")}, false)
	client, err := sql.Open("mysql", fmt.Sprintf("app:app@tcp(%s)/%s", addr, db))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	waitFor(t, "holdfast serving", func() bool { return client.Ping() == nil })
	mustExec(t, client, "CREATE TABLE big (id BIGINT PRIMARY KEY, pad CHAR(100)) ENGINE=InnoDB")

	load := func(lines int) (time.Duration, int64) {
		name := fmt.Sprintf("hf_big_%d", lines)
		gsd.RegisterReaderHandler(name, func() io.Reader { return newRowFile(lines) })
		defer gsd.DeregisterReaderHandler(name)
		mustExec(t, client, "TRUNCATE TABLE big")
		start := time.Now()
		res := mustExec(t, client, "LOAD DATA LOCAL INFILE 'Reader::"+name+"' INTO TABLE big FIELDS TERMINATED BY ','")
		took := time.Since(start)
		if n, _ := res.RowsAffected(); n != int64(lines) {
			t.Fatalf("loaded %d rows, want %d", n, lines)
		}
		return took, peakRSS(t, h.Pid())
	}
	const mib = 1 << 20
	_, small := load(mib / 100)
	took, big := load(100 * mib / 100)
	if n := queryString(t, dbtest.Open(t, db), "SELECT COUNT(*) FROM big"); n != strconv.Itoa(100*mib/100) {
		t.Fatalf("%s rows in the table", n)
	}
	report := fmt.Sprintf("holdfast peak RSS (VmHWM): %.1f MiB after a 1 MiB load, %.1f MiB after a 100 MiB load (%d rows in %v)",
		float64(small)/mib, float64(big)/mib, 100*mib/100, took.Round(time.Millisecond))
	t.Log(report)
	fmt.Println(report)
	if big-small > 16*mib {
		t.Fatalf("peak RSS grew by %.1f MiB over the 100 MiB load: the file did not stream", float64(big-small)/mib)
	}
}
