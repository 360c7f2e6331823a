package docstest

import (
	"context"
	"database/sql"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"
	"gopkg.in/yaml.v3"

	"github.com/holdfast-db/holdfast/internal/dbtest"
	"github.com/holdfast-db/holdfast/internal/holdfastproc"
	"github.com/holdfast-db/holdfast/reservation/legacy/redistest"
)

// repo is the repository's top directory, seen from this package.
const repo = "../.."

// commandBound is a hang guard on each command a doc shows (quick ones
// return in well under a second); past it the command is reported as one
// that needs a skip marker. It is not a timing assertion.
const commandBound = time.Minute

// TestDocs runs every SQL and shell block of README.md and docs/*.md, file
// by file, each file against a holdfast and a database of its own.
func TestDocs(t *testing.T) {
	files := []string{"README.md"}
	more, err := filepath.Glob(filepath.Join(repo, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range more {
		files = append(files, filepath.ToSlash(strings.TrimPrefix(m, repo+string(filepath.Separator))))
	}
	tests := definedTests(t)
	var (
		bin   = t.TempDir() // holdfast and holdfastctl, built on first need
		once  sync.Once
		built bool
	)
	build := func(t *testing.T) string {
		once.Do(func() { built = buildCommands(t, bin) })
		if !built {
			t.Fatal("the build failed (see the first file's failure)")
		}
		return bin
	}
	for _, file := range files {
		t.Run(file, func(t *testing.T) {
			text, err := os.ReadFile(filepath.Join(repo, file))
			if err != nil {
				t.Fatal(err)
			}
			blocks, err := Parse(file, string(text))
			if err != nil {
				t.Fatal(err)
			}
			checkMarkers(t, blocks, tests)
			if !runnable(blocks) {
				return
			}
			fx := startHoldfast(t, build(t), blocks)
			for _, b := range blocks {
				switch {
				case b.Lang == "sql":
					fx.runSQL(t, b)
				case isShell(b):
					fx.runShell(t, b)
				}
			}
		})
	}
}

// checkMarkers fails on markers that skip nothing or name a test that
// does not exist.
func checkMarkers(t *testing.T, blocks []*Block, tests map[string]bool) {
	t.Helper()
	for _, b := range blocks {
		for _, s := range b.Skips {
			for _, name := range s.NamedTests() {
				if !tests[name] {
					t.Errorf("%s:%d: marker %s names %s, which no _test.go in the repository defines", b.File, s.Line, s, name)
				}
			}
		}
		if !isShell(b) {
			continue
		}
		for _, s := range StaleSkips(b) {
			t.Errorf("%s:%d: marker %s matches no command of the block at line %d", b.File, s.Line, s, b.Line)
		}
	}
}

func isShell(b *Block) bool { return b.Lang == "sh" || b.Lang == "shell" || b.Lang == "bash" }

// runnable reports whether any block has something to run.
func runnable(blocks []*Block) bool {
	for _, b := range blocks {
		if b.Lang == "sql" && len(Statements(b)) > 0 {
			if _, skip := b.Whole(); !skip {
				return true
			}
		}
		if isShell(b) {
			for _, c := range Commands(b) {
				if _, skip := b.SkipFor(c); !skip {
					return true
				}
			}
		}
	}
	return false
}

// definedTests is every test function name in the repository's _test.go
// files.
func definedTests(t *testing.T) map[string]bool {
	t.Helper()
	re := regexp.MustCompile(`(?m)^func (Test\w+)\(`)
	out := map[string]bool{}
	err := filepath.WalkDir(repo, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != repo && strings.HasPrefix(d.Name(), ".") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range re.FindAllSubmatch(b, -1) {
			out[string(m[1])] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// buildCommands puts holdfast and holdfastctl into dir.
func buildCommands(t *testing.T, dir string) bool {
	t.Helper()
	for _, pkg := range []string{"./cmd/holdfast", "./cmd/holdfastctl"} {
		if err := os.Symlink(dbtest.Command(t, pkg), filepath.Join(dir, filepath.Base(pkg))); err != nil {
			t.Error(err)
			return false
		}
	}
	return true
}

// fixture is one running holdfast and the directory a doc's commands run
// in.
type fixture struct {
	dir    string   // working directory: config.yaml, bin/
	env    []string // commands' environment
	rw     Rewrites
	out    *dbtest.SyncBuffer // holdfast's output
	conn   *sql.Conn          // the file's SQL connection, opened on first use
	sqlErr bool               // an SQL statement failed: the rest depend on it
	tokens Tokens
}

// startHoldfast makes a working directory with config.yaml (the
// repository's, with the file's yaml blocks merged over it), applies the
// schema to a fresh database and starts holdfast serve on private
// listeners, as `make run` does on the defaults.
func startHoldfast(t *testing.T, bin string, blocks []*Block) *fixture {
	t.Helper()
	fx := &fixture{dir: t.TempDir(), out: &dbtest.SyncBuffer{}}
	if err := os.Symlink(bin, filepath.Join(fx.dir, "bin")); err != nil {
		t.Fatal(err)
	}
	cfg, err := os.ReadFile(filepath.Join(repo, "config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg, err = mergeConfig(t, cfg, blocks); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(fx.dir, "config.yaml"), cfg, 0o600); err != nil {
		t.Fatal(err)
	}
	c := dbtest.Config(t)
	fx.rw = Rewrites{Listen: dbtest.FreeAddr(t), Admin: dbtest.FreeAddr(t), Database: dbtest.NewDatabase(t)}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "HOLDFAST_") && !strings.HasPrefix(kv, "PATH=") {
			fx.env = append(fx.env, kv)
		}
	}
	more := []string{
		"PATH=" + filepath.Join(fx.dir, "bin") + string(filepath.ListSeparator) + os.Getenv("PATH"),
		"HOLDFAST_LISTEN=" + fx.rw.Listen,
		"HOLDFAST_ADMIN_LISTEN=" + fx.rw.Admin,
		"HOLDFAST_ADMIN_ADDR=" + fx.rw.Admin,
		"HOLDFAST_BACKEND_ADDRESS=" + c.Addr,
		"HOLDFAST_BACKEND_USER=" + c.User,
		"HOLDFAST_BACKEND_PASSWORD=" + c.Passwd,
		"HOLDFAST_BACKEND_DATABASE=" + fx.rw.Database,
		"HOLDFAST_FLEET_DATABASE=" + dbtest.NewTablesDB(t, fx.rw.Database),
	}
	fx.env = append(fx.env, more...)
	p := holdfastproc.New(holdfastproc.Options{Bin: "bin/holdfast", Config: "config.yaml", Dir: fx.dir, Env: more,
		Output: fx.out, Ready: func(ctx context.Context) error {
			for _, addr := range []string{fx.rw.Listen, fx.rw.Admin} {
				if err := holdfastproc.DialReady(addr)(ctx); err != nil {
					return err
				}
			}
			return nil
		}})
	mctx, cancel := context.WithTimeout(context.Background(), commandBound)
	defer cancel()
	if _, err := p.Migrate(mctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if fx.conn != nil {
			fx.conn.Close()
		}
		_ = p.Stop(20 * time.Second)
		if t.Failed() {
			t.Logf("holdfast's output:\n%s", fx.out.String())
		}
	})
	if err := p.Start(context.Background()); err != nil {
		t.Fatalf("%v\n%s", err, fx.out.String())
	}
	return fx
}

// mergeConfig merges the file's yaml blocks over config.yaml. With none,
// config.yaml is returned as it is. A block naming the default Redis
// address gets a private Redis instead.
func mergeConfig(t *testing.T, base []byte, blocks []*Block) ([]byte, error) {
	t.Helper()
	var m map[string]any
	for _, b := range blocks {
		if b.Lang != "yaml" && b.Lang != "yml" {
			continue
		}
		if m == nil {
			if err := yaml.Unmarshal(base, &m); err != nil {
				return nil, fmt.Errorf("config.yaml: %w", err)
			}
		}
		text := strings.Join(b.Lines, "\n")
		if strings.Contains(text, "127.0.0.1:6379") {
			text = strings.ReplaceAll(text, "127.0.0.1:6379", redistest.Start(t).Addr)
		}
		var over map[string]any
		if err := yaml.Unmarshal([]byte(text), &over); err != nil {
			return nil, fmt.Errorf("%s: %w", b.Where(0), err)
		}
		merge(m, over)
	}
	if m == nil {
		return base, nil
	}
	return yaml.Marshal(m)
}

// merge copies src over dst, recursively for mappings.
func merge(dst, src map[string]any) {
	for k, v := range src {
		if sv, ok := v.(map[string]any); ok {
			if dv, ok := dst[k].(map[string]any); ok {
				merge(dv, sv)
				continue
			}
		}
		dst[k] = v
	}
}

// runShell runs each command of a shell block that no marker skips.
func (fx *fixture) runShell(t *testing.T, b *Block) {
	for _, c := range Commands(b) {
		if s, skip := b.SkipFor(c); skip {
			t.Logf("%s: skipped: %s", b.Where(c.Index), s)
			continue
		}
		line := fx.rw.Rewrite(c.Text)
		ctx, cancel := context.WithTimeout(context.Background(), commandBound)
		cmd := exec.CommandContext(ctx, "bash", "-c", line)
		cmd.Dir, cmd.Env = fx.dir, fx.env
		cmd.Stdin = nil // empty: an interactive client returns at once
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
		cmd.WaitDelay = 5 * time.Second
		out, err := cmd.CombinedOutput()
		timedOut := ctx.Err() != nil
		cancel()
		switch {
		case timedOut:
			t.Errorf("%s: %s\ndid not return within %v: a command that does not return needs a docs-test skip marker\n%s",
				b.Where(c.Index), c.Text, commandBound, out)
		case err != nil:
			t.Errorf("%s: %s\n(run as: %s)\n%v\n%s", b.Where(c.Index), c.Text, line, err, out)
		default:
			t.Logf("%s: ran: %s", b.Where(c.Index), line)
		}
	}
}

// runSQL runs an SQL block's statements in order on the file's
// connection, and compares the shown output, if any, with the last one's
// result.
func (fx *fixture) runSQL(t *testing.T, b *Block) {
	if s, skip := b.Whole(); skip {
		t.Logf("%s: skipped: %s", b.Where(-1), s)
		return
	}
	if fx.sqlErr {
		t.Errorf("%s: not run: an earlier SQL statement of the file failed", b.Where(-1))
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), commandBound)
	defer cancel()
	if fx.conn == nil {
		db, err := sql.Open("mysql", fmt.Sprintf("app:app@tcp(%s)/%s", fx.rw.Listen, fx.rw.Database))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		if fx.conn, err = db.Conn(ctx); err != nil {
			t.Fatalf("%s: connecting to holdfast as app: %v", b.Where(-1), err)
		}
	}
	var last Table
	stmts := Statements(b)
	for _, s := range stmts {
		q, err := fx.tokens.Map(s.Text)
		if err == nil {
			last, err = query(ctx, fx.conn, q, &fx.tokens)
		}
		if err != nil {
			fx.sqlErr = true
			t.Errorf("%s: %s\n%v", b.Where(s.Index), s.Text, err)
			return
		}
		t.Logf("%s: ran: %s", b.Where(s.Index), q)
	}
	if b.Output == nil || len(stmts) == 0 {
		return
	}
	shown, err := ParseTable(b.Output)
	if err == nil {
		err = Compare(shown, last, &fx.tokens)
	}
	if err != nil {
		t.Errorf("%s: the output shown for the statement at %s: %v\nthe run gave:\n%s",
			b.Output.Where(-1), b.Where(stmts[len(stmts)-1].Index), err, last)
	}
}

// query runs one statement and returns its first result set (empty for a
// statement without one), recording the tokens in every value.
func query(ctx context.Context, conn *sql.Conn, q string, k *Tokens) (Table, error) {
	rows, err := conn.QueryContext(ctx, q)
	if err != nil {
		return Table{}, err
	}
	defer rows.Close()
	var first Table
	for {
		cols, err := rows.Columns()
		if err != nil {
			return first, err
		}
		t := Table{Columns: cols}
		vals := make([]sql.RawBytes, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		for rows.Next() {
			if err := rows.Scan(ptrs...); err != nil {
				return first, err
			}
			r := make([]string, len(cols))
			for i, v := range vals {
				if r[i] = string(v); v == nil {
					r[i] = "NULL"
				}
				k.Observe(r[i])
			}
			t.Rows = append(t.Rows, r)
		}
		if len(first.Columns) == 0 {
			first = t
		}
		if !rows.NextResultSet() {
			break
		}
	}
	return first, rows.Err()
}
