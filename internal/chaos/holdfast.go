package chaos

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"text/template"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/holdfast-db/holdfast/internal/dbtest"
)

// Accounts. The clients log in to holdfast as clientUser; holdfast's pool
// logs in to MariaDB as backendUser, whose threads the backend scenario
// finds in the process list and kills. Each password is the name.
const (
	clientUser  = "chaos"
	backendUser = "hf_chaos_backend"
)

// buildHoldfast builds ./cmd/holdfast of repo into dir.
func buildHoldfast(ctx context.Context, goCmd, repo, dir string, race bool) (string, error) {
	bin := filepath.Join(dir, "holdfast")
	args := []string{"build", "-o", bin}
	if race {
		args = append(args, "-race")
	}
	cmd := exec.CommandContext(ctx, goCmd, append(args, "./cmd/holdfast")...)
	cmd.Dir = repo
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("chaos: go %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return bin, nil
}

// holdfastConfig is what a scenario sets in holdfast's configuration:
// addresses, accounts, and the TTL rule short enough for the harness's TTL.
// Everything else is holdfast's default (config.yaml).
type holdfastConfig struct {
	Listen, Admin string
	Backend       string // MariaDB host:port
	Database      string
	Instances     int // backend.instances
	TTL           time.Duration
	PoolCap       int
	Replica       string // a replica's host:port ("" none): the catalog tag's reads go to it
}

var configTmpl = template.Must(template.New("holdfast.yaml").Funcs(template.FuncMap{
	"minus": func(a, b time.Duration) time.Duration { return a - b },
}).Parse(`# written by holdfast-chaos
listen: {{.Listen}}
shutdown_grace: 2s
users:
  - name: ` + clientUser + `
    password: ` + clientUser + `
    auth_plugin: mysql_native_password
backend:
  address: {{.Backend}}
  user: ` + backendUser + `
  password: ` + backendUser + `
  database: {{.Database}}
  instances: {{.Instances}}   # 0: from the fleet's live instances
{{- if .Replica}}
  replicas: [{address: "{{.Replica}}"}]
routing:
  tags: {catalog: replica}
  check_interval: 50ms
{{- end}}
log:
  level: warn
admin:
  listen: {{.Admin}}
reservation:
  # The TTL rule, scaled down: ttl_seconds {{.TTL}} > payment_timeout +
  # callback_retry_window + clock_skew = {{minus .TTL 500000000}}.
  payment_timeout: {{minus .TTL 2000000000}}
  callback_retry_window: 1s
  clock_skew: 500ms
  default_ttl: {{.TTL}}
  pool_cap: {{.PoolCap}}
`))

func (c holdfastConfig) yaml() []byte {
	var b bytes.Buffer
	if err := configTmpl.Execute(&b, c); err != nil {
		panic(err) // fixed template, fixed input types
	}
	return b.Bytes()
}

// holdfast is one holdfast instance: a child process that the harness
// may kill and restart on the same addresses. Its stderr from every
// incarnation goes to one log file.
type holdfast struct {
	n      int
	bin    string
	cfg    holdfastConfig
	config string // path
	log    string // path

	mu      sync.Mutex // guards following
	cmd     *exec.Cmd
	done    chan struct{} // closed when cmd has exited
	killed  bool          // the harness ended this incarnation
	exits   []string      // incarnations that ended without the harness
	starts  int
	recBase map[string]float64 // recoveries of earlier incarnations
	recLast map[string]float64 // last scrape of this incarnation
}

// newHoldfast writes instance n's configuration as dir/name.yaml; its log
// is dir/name.log. It starts nothing.
func newHoldfast(n int, name, bin, dir string, cfg holdfastConfig) (*holdfast, error) {
	h := &holdfast{n: n, bin: bin, cfg: cfg,
		config:  filepath.Join(dir, name+".yaml"),
		log:     filepath.Join(dir, name+".log"),
		recBase: map[string]float64{}, recLast: map[string]float64{}}
	if err := os.WriteFile(h.config, cfg.yaml(), 0o600); err != nil {
		return nil, fmt.Errorf("chaos: %w", err)
	}
	return h, nil
}

// migrate runs `holdfast migrate` on the instance's configuration.
func (h *holdfast) migrate(ctx context.Context) error {
	out, err := exec.CommandContext(ctx, h.bin, "migrate", "-config", h.config).CombinedOutput()
	if err != nil {
		return fmt.Errorf("chaos: holdfast migrate: %w\n%s", err, out)
	}
	return nil
}

// start starts an incarnation and waits until it answers a CALL.
func (h *holdfast) start(ctx context.Context) error {
	logf, err := os.OpenFile(h.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("chaos: %w", err)
	}
	defer logf.Close() // the child has its own descriptor
	fmt.Fprintf(logf, "---- chaos: start %s\n", time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(h.bin, "serve", "-config", h.config)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = childEnv()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("chaos: start holdfast: %w", err)
	}
	done := make(chan struct{})
	h.mu.Lock()
	h.cmd, h.done, h.killed = cmd, done, false
	h.starts++
	h.mu.Unlock()
	go func() {
		err := cmd.Wait()
		h.mu.Lock()
		if !h.killed {
			h.exits = append(h.exits, fmt.Sprintf("holdfast %d exited by itself: %v", h.n, err))
		}
		h.mu.Unlock()
		close(done)
	}()
	return h.waitReady(ctx, done)
}

func (h *holdfast) waitReady(ctx context.Context, done chan struct{}) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	db, err := sql.Open("mysql", clientDSN(h.cfg.Listen, true, 2*time.Second))
	if err != nil {
		return fmt.Errorf("chaos: %w", err)
	}
	defer db.Close()
	var last error
	for {
		_, err := db.ExecContext(ctx, "CALL holdfast.availability(1, 1)")
		if err == nil {
			return nil
		}
		last = err
		select {
		case <-done:
			return fmt.Errorf("chaos: holdfast %d exited while starting (log %s)\n%s", h.n, h.log, tail(h.log, 15))
		case <-ctx.Done():
			return fmt.Errorf("chaos: holdfast %d did not answer within 30s: %v (log %s)\n%s", h.n, last, h.log, tail(h.log, 15))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// kill9 ends the incarnation with SIGKILL and waits for it.
func (h *holdfast) kill9() {
	h.mu.Lock()
	cmd, done := h.cmd, h.done
	h.killed = true
	for k, v := range h.recLast {
		h.recBase[k] += v
	}
	h.recLast = map[string]float64{}
	h.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	<-done
}

// stop ends the incarnation with SIGTERM (SIGKILL after 15 s).
func (h *holdfast) stop() {
	h.mu.Lock()
	cmd, done := h.cmd, h.done
	h.killed = true
	h.mu.Unlock()
	if cmd == nil {
		return
	}
	dbtest.Terminate(cmd.Process, done, 15*time.Second)
}

// scrape reads holdfast_reservation_recoveries_total from /metrics into
// the incarnation's last values.
func (h *holdfast) scrape(ctx context.Context) error {
	rec, err := scrapeRecoveries(ctx, "http://"+h.cfg.Admin+"/metrics")
	if err != nil {
		return err
	}
	h.mu.Lock()
	if !h.killed {
		h.recLast = rec
	}
	h.mu.Unlock()
	return nil
}

// recoveries returns the recoveries counted over every incarnation (up to
// each one's last scrape).
func (h *holdfast) recoveries() map[string]float64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[string]float64{}
	for k, v := range h.recBase {
		out[k] += v
	}
	for k, v := range h.recLast {
		out[k] += v
	}
	return out
}

func (h *holdfast) unexpectedExits() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.exits...)
}

func (h *holdfast) alive() bool {
	h.mu.Lock()
	done := h.done
	h.mu.Unlock()
	if done == nil {
		return false
	}
	select {
	case <-done:
		return false
	default:
		return true
	}
}

const recoveriesMetric = "holdfast_reservation_recoveries_total"

// scrapeRecoveries fetches a Prometheus text page and returns the
// recoveries counter by procedure.
func scrapeRecoveries(ctx context.Context, url string) (map[string]float64, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("chaos: scrape %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("chaos: scrape %s: %s", url, resp.Status)
	}
	return parseRecoveries(bufio.NewScanner(resp.Body))
}

func parseRecoveries(sc *bufio.Scanner) (map[string]float64, error) {
	out := map[string]float64{}
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, recoveriesMetric+"{")
		if !ok {
			continue
		}
		labels, value, ok := strings.Cut(rest, "} ")
		if !ok {
			continue
		}
		proc := ""
		for _, l := range strings.Split(labels, ",") {
			if v, ok := strings.CutPrefix(l, `procedure="`); ok {
				proc = strings.TrimSuffix(v, `"`)
			}
		}
		v, err := strconv.ParseFloat(strings.Fields(value)[0], 64)
		if err != nil {
			return nil, fmt.Errorf("chaos: metric line %q: %w", line, err)
		}
		out[proc] = v
	}
	return out, sc.Err()
}

// clientDSN is a go-sql-driver DSN for clientUser at addr. interpolate
// picks the text protocol (arguments interpolated by the driver) over
// prepared statements; readTimeout bounds the wait for an answer.
func clientDSN(addr string, interpolate bool, readTimeout time.Duration) string {
	c := mysql.NewConfig()
	c.User, c.Passwd, c.Net, c.Addr = clientUser, clientUser, "tcp", addr
	c.Timeout = 2 * time.Second
	c.ReadTimeout, c.WriteTimeout = readTimeout, readTimeout
	c.InterpolateParams = interpolate
	return c.FormatDSN()
}

// childEnv is this process's environment without HOLDFAST_* overrides of
// the configuration file.
func childEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "HOLDFAST_") {
			env = append(env, kv)
		}
	}
	return env
}

// tail returns the last n lines of the file at path.
func tail(path string, n int) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// logProblems returns the lines of holdfast's log that show a crash, a
// data race or a panic recovered in a client session (shortened to the
// panic and the frame that raised it).
func logProblems(path string) []string {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		l := sc.Text()
		switch {
		case strings.HasPrefix(l, "panic: ") || strings.HasPrefix(l, "fatal error: ") || strings.Contains(l, "WARNING: DATA RACE"):
			out = append(out, l)
		case strings.Contains(l, `msg="panic`):
			out = append(out, shortPanic(l))
		}
	}
	return out
}

// shortPanic shortens a logged panic with its stack (slog text, newlines
// escaped) to the message and the frame that panicked.
func shortPanic(l string) string {
	head, stack, _ := strings.Cut(l, " stack=")
	frames := strings.Split(stack, `\n`)
	// "panic(...)", its file, then the function that panicked and its file.
	for i, fr := range frames {
		if strings.HasPrefix(fr, "panic(") && i+3 < len(frames) {
			fn := frames[i+2]
			if j := strings.LastIndexByte(fn, '('); j > 0 {
				fn = fn[:j]
			}
			at, _, _ := strings.Cut(strings.TrimPrefix(frames[i+3], `\t`), " ")
			return head + " in " + fn + " at " + at
		}
	}
	return head
}
