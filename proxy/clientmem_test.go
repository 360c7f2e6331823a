package proxy

import (
	"bufio"
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/holdfast-db/holdfast/internal/dbtest"
	"github.com/holdfast-db/holdfast/internal/holdfastproc"
)

// statusKB is a field of /proc/<pid>/status (VmRSS, VmHWM, ...), in bytes.
func statusKB(t *testing.T, pid int, field string) int64 {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

// TestIdleClientMemory (make client-memory) measures what an idle client
// costs a holdfast process (the binary named by HOLDFAST_BIN): it opens
// idle client connections in steps (HOLDFAST_CLIENT_STEPS, default
// 2000,5000), plain and over TLS, and reports holdfast's resident memory
// (VmRSS) after each step and the cost per client, the figure behind
// sessions.max_clients's default. It asserts nothing about the figures.
func TestIdleClientMemory(t *testing.T) {
	bin := os.Getenv("HOLDFAST_BIN")
	if bin == "" || os.Getenv("HOLDFAST_CLIENT_MEMORY") == "" {
		t.Skip("thousands of idle clients through a holdfast process: run `make client-memory`")
	}
	var steps []int
	for _, f := range strings.Split(cmp.Or(os.Getenv("HOLDFAST_CLIENT_STEPS"), "2000,5000"), ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			t.Fatalf("HOLDFAST_CLIENT_STEPS: %q", f)
		}
		steps = append(steps, n)
	}
	cert, key := writeTestCert(t, t.TempDir())
	var report []string
	for _, tls := range []bool{false, true} {
		name := "plain"
		if tls {
			name = "tls"
		}
		t.Run(name, func(t *testing.T) {
			db := dbtest.NewDatabase(t)
			addr := dbtest.FreeAddr(t)
			dir := t.TempDir()
			cfgPath := filepath.Join(dir, "holdfast.yaml")
			yml := fmt.Sprintf("pool:\n  min: 1\n  max: 2\n  max_idle: 2\nsessions:\n  max_clients: 0\nlog:\n  level: warn\nreservation:\n  enabled: false\ntls:\n  cert_file: %s\n  key_file: %s\n", cert, key)
			dbtest.WriteHoldfastConfig(t, cfgPath, holdfastproc.Config{Listen: addr, Users: []holdfastproc.User{{Name: "app", Password: "app"}},
				Backend: holdfastproc.Backend{Database: db}, YAML: yml})
			h := dbtest.StartHoldfast(t, holdfastproc.Options{Bin: bin, Config: cfgPath, Listen: addr, LogPath: filepath.Join(dir, "holdfast.log")}, false)
			dsn := fmt.Sprintf("app:app@tcp(%s)/%s", addr, db)
			if tls {
				dsn += "?tls=skip-verify"
			}
			client, err := sql.Open("mysql", dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer client.Close()
			client.SetMaxOpenConns(0)
			client.SetMaxIdleConns(-1)
			ctx := context.Background()
			var conns []*sql.Conn
			defer func() {
				for _, c := range conns {
					c.Close()
				}
			}()
			// One client first: the process has served, and dialed the backend.
			c, err := client.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.ExecContext(ctx, "SELECT 1"); err != nil {
				t.Fatal(err)
			}
			conns = append(conns, c)
			time.Sleep(time.Second)
			base := statusKB(t, h.Pid(), "VmRSS")
			line := fmt.Sprintf("%s: VmRSS %.1f MiB with 1 client", name, float64(base)/(1<<20))
			prevN, prevRSS := 1, base
			for _, n := range steps {
				var mu sync.Mutex
				opening := len(conns)
				concurrently(t, 16, func(w int) error {
					for {
						mu.Lock()
						if opening >= n {
							mu.Unlock()
							return nil
						}
						opening++
						mu.Unlock()
						c, err := client.Conn(ctx)
						if err == nil {
							err = c.PingContext(ctx)
						}
						if err != nil {
							return err
						}
						mu.Lock()
						conns = append(conns, c)
						mu.Unlock()
					}
				})
				if t.Failed() {
					return
				}
				time.Sleep(2 * time.Second) // the handshakes' goroutines end, their stacks are freed
				rss := statusKB(t, h.Pid(), "VmRSS")
				line += fmt.Sprintf("; %.1f MiB with %d (%.1f KiB per client since %d)", float64(rss)/(1<<20), len(conns),
					float64(rss-prevRSS)/float64(len(conns)-prevN)/1024, prevN)
				prevN, prevRSS = len(conns), rss
			}
			line += fmt.Sprintf("; VmHWM %.1f MiB", float64(statusKB(t, h.Pid(), "VmHWM"))/(1<<20))
			t.Log(line)
			report = append(report, line)
		})
	}
	for _, l := range report {
		fmt.Println("idle clients, " + l)
	}
}
