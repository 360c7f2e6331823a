package dbtest

import (
	"database/sql"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
)

// Private is a MariaDB server of a test's own, on its own port and data
// directory, for tests that kill, restart or reconfigure a server: the
// shared one (DSN) is left alone. Programs (the fault harness) get one
// from NewPrivate.
type Private struct {
	Addr string // 127.0.0.1:port; root with an empty password
	dir  string
	args []string
	cmd  *exec.Cmd
	t    testing.TB // nil for a server from NewPrivate
}

// StartPrivate initialises a data directory under the test's temporary
// directory and starts mariadbd on a free port, with binary logging on
// (ROW format, server id 1) and args added to its command line (e.g.
// "--max-prepared-stmt-count=300"). It is stopped at
// cleanup. It needs the mariadb-server package (installed by `make test`).
func StartPrivate(t testing.TB, args ...string) *Private {
	t.Helper()
	p, err := NewPrivate(t.TempDir(), args...)
	if err != nil {
		t.Fatal(err)
	}
	p.t = t
	t.Cleanup(p.Stop)
	return p
}

// NewPrivate is StartPrivate for programs: it initialises a data directory
// under dir (which must exist) and starts mariadbd, returning errors
// instead of failing a test. The caller must Stop it, and restarts it with
// Restart (Start is for tests).
func NewPrivate(dir string, args ...string) (*Private, error) {
	bin, err := exec.LookPath("mariadbd")
	if err != nil {
		bin = "/usr/sbin/mariadbd"
	}
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("dbtest: no mariadbd to start a private server (install mariadb-server): %w", err)
	}
	install := exec.Command("mariadb-install-db", "--no-defaults", "--datadir="+filepath.Join(dir, "data"),
		"--auth-root-authentication-method=normal", "--skip-test-db",
		// Temporary tables of its own: bootstraps run at once by parallel
		// test binaries clashed over names in the shared /tmp.
		"--tmpdir="+dir)
	if os.Geteuid() == 0 {
		install.Args = append(install.Args, "--user=root")
	}
	if out, err := install.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("dbtest: mariadb-install-db: %w\n%s", err, out)
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	p := &Private{dir: dir, args: args, Addr: "127.0.0.1:" + strconv.Itoa(port)}
	if err := p.Restart(); err != nil {
		return nil, err
	}
	return p, nil
}

// Start starts the server (again, after Stop or Kill) and waits until it
// answers; it fails the test if it does not.
func (p *Private) Start() {
	if p.t == nil {
		if err := p.Restart(); err != nil {
			panic(err)
		}
		return
	}
	p.t.Helper()
	if err := p.Restart(); err != nil {
		p.t.Fatal(err)
	}
}

// Restart is Start returning its error: it starts the server (again, after
// Stop or Kill) and waits up to 30 s until it answers.
func (p *Private) Restart() error {
	_, port, _ := net.SplitHostPort(p.Addr)
	args := []string{"--no-defaults", "--datadir=" + filepath.Join(p.dir, "data"), "--port=" + port,
		"--bind-address=127.0.0.1", "--socket=" + filepath.Join(p.dir, "mysqld.sock"),
		"--pid-file=" + filepath.Join(p.dir, "mysqld.pid"), "--log-error=" + filepath.Join(p.dir, "error.log"),
		"--innodb-buffer-pool-size=32M", "--innodb-log-file-size=8M", "--max-connections=1000",
		"--innodb-fast-shutdown=2", "--tmpdir=" + p.dir}
	// Shaped like a production primary: binary logging on, ROW format,
	// GTIDs (MariaDB reports last_gtid on every commit). --skip-log-bin
	// among p.args turns it off again.
	args = append(args, "--log-bin="+filepath.Join(p.dir, "data", "binlog"), "--binlog-format=ROW", "--server-id=1")
	if os.Geteuid() == 0 {
		args = append(args, "--user=root")
	}
	bin, err := exec.LookPath("mariadbd")
	if err != nil {
		bin = "/usr/sbin/mariadbd"
	}
	p.cmd = exec.Command(bin, append(args, p.args...)...)
	if err := p.cmd.Start(); err != nil {
		p.cmd = nil
		return fmt.Errorf("dbtest: start mariadbd: %w", err)
	}
	db, err := p.open("")
	if err != nil {
		return err
	}
	defer db.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if err := db.Ping(); err == nil {
			return nil
		} else if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(p.dir, "error.log"))
			return fmt.Errorf("dbtest: private MariaDB at %s did not answer: %w\n%s", p.Addr, err, log)
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
	done := make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(done) }()
	Terminate(p.cmd.Process, done, 20*time.Second)
	p.cmd = nil
}

// Open returns a pool to database db ("" for none) on the private server
// as root; the caller closes it.
func (p *Private) Open(db string) *sql.DB {
	d, err := p.open(db)
	if err != nil {
		if p.t == nil {
			panic(err)
		}
		p.t.Fatal(err)
	}
	return d
}

func (p *Private) open(db string) (*sql.DB, error) {
	c := mysql.NewConfig()
	c.Net, c.Addr, c.User, c.DBName = "tcp", p.Addr, "root", db
	c.MultiStatements = true
	c.Timeout = 2 * time.Second
	d, err := sql.Open("mysql", c.FormatDSN())
	if err != nil {
		return nil, fmt.Errorf("dbtest: %w", err)
	}
	return d, nil
}

func freePort() (int, error) {
	addr, err := ListenAddr()
	if err != nil {
		return 0, err
	}
	_, port, _ := net.SplitHostPort(addr)
	return strconv.Atoi(port)
}

// Pid is the running server's process id (0 when it is not running).
func (p *Private) Pid() int {
	if p.cmd == nil || p.cmd.Process == nil {
		return 0
	}
	return p.cmd.Process.Pid
}
