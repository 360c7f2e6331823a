package dbtest

import (
	"database/sql"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
)

// Private is a MariaDB server of a test's own, on its own port and data
// directory, for tests that kill, restart or reconfigure a server: the
// shared one (DSN) is left alone.
type Private struct {
	Addr string // 127.0.0.1:port; root with an empty password
	dir  string
	args []string
	cmd  *exec.Cmd
	t    testing.TB
}

// StartPrivate initialises a data directory under the test's temporary
// directory and starts mariadbd on a free port with args added to its
// command line (e.g. "--max-prepared-stmt-count=300"). It is stopped at
// cleanup. It needs the mariadb-server package (installed by `make test`).
func StartPrivate(t testing.TB, args ...string) *Private {
	t.Helper()
	bin, err := exec.LookPath("mariadbd")
	if err != nil {
		bin = "/usr/sbin/mariadbd"
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("dbtest: no mariadbd to start a private server (install mariadb-server): %v", err)
	}
	dir := t.TempDir()
	install := exec.Command("mariadb-install-db", "--no-defaults", "--datadir="+filepath.Join(dir, "data"),
		"--auth-root-authentication-method=normal", "--skip-test-db")
	if os.Geteuid() == 0 {
		install.Args = append(install.Args, "--user=root")
	}
	if out, err := install.CombinedOutput(); err != nil {
		t.Fatalf("dbtest: mariadb-install-db: %v\n%s", err, out)
	}
	p := &Private{dir: dir, args: args, t: t}
	p.Addr = "127.0.0.1:" + strconv.Itoa(freePort(t))
	p.Start()
	t.Cleanup(p.Stop)
	return p
}

// Start starts the server (again, after Stop or Kill) and waits until it
// answers.
func (p *Private) Start() {
	p.t.Helper()
	_, port, _ := net.SplitHostPort(p.Addr)
	args := []string{"--no-defaults", "--datadir=" + filepath.Join(p.dir, "data"), "--port=" + port,
		"--bind-address=127.0.0.1", "--socket=" + filepath.Join(p.dir, "mysqld.sock"),
		"--pid-file=" + filepath.Join(p.dir, "mysqld.pid"), "--log-error=" + filepath.Join(p.dir, "error.log"),
		"--innodb-buffer-pool-size=32M", "--innodb-log-file-size=8M", "--max-connections=1000", "--skip-log-bin",
		"--innodb-fast-shutdown=2"}
	if os.Geteuid() == 0 {
		args = append(args, "--user=root")
	}
	bin, err := exec.LookPath("mariadbd")
	if err != nil {
		bin = "/usr/sbin/mariadbd"
	}
	p.cmd = exec.Command(bin, append(args, p.args...)...)
	if err := p.cmd.Start(); err != nil {
		p.t.Fatalf("dbtest: start mariadbd: %v", err)
	}
	db := p.Open("")
	defer db.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if err := db.Ping(); err == nil {
			return
		} else if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(p.dir, "error.log"))
			p.t.Fatalf("dbtest: private MariaDB at %s did not answer: %v\n%s", p.Addr, err, log)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Kill stops the server at once (SIGKILL).
func (p *Private) Kill() {
	if p.cmd != nil && p.cmd.Process != nil {
		_ = p.cmd.Process.Kill()
		_ = p.cmd.Wait()
		p.cmd = nil
	}
}

// Stop shuts the server down (SIGTERM, then SIGKILL after 20 s).
func (p *Private) Stop() {
	if p.cmd == nil || p.cmd.Process == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		_ = p.cmd.Process.Kill()
		<-done
	}
	p.cmd = nil
}

// Open returns a pool to database db ("" for none) on the private server
// as root; the caller closes it.
func (p *Private) Open(db string) *sql.DB {
	c := mysql.NewConfig()
	c.Net, c.Addr, c.User, c.DBName = "tcp", p.Addr, "root", db
	c.MultiStatements = true
	c.Timeout = 2 * time.Second
	d, err := sql.Open("mysql", c.FormatDSN())
	if err != nil {
		p.t.Fatalf("dbtest: %v", err)
	}
	return d
}

func freePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(fmt.Errorf("dbtest: %w", err))
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}
