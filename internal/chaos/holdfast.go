package chaos

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/holdfast-db/holdfast/internal/holdfastproc"
)

// Accounts. The clients log in to holdfast as clientUser; holdfast's pool
// logs in to MariaDB as backendUser, whose threads the backend scenario
// finds in the process list and kills. Each password is the name.
const (
	clientUser  = "chaos"
	backendUser = "hf_chaos_backend"
)

// holdfastConfig is what a scenario sets in holdfast's configuration:
// addresses, accounts, and the TTL rule short enough for the harness's TTL.
// Everything else is holdfast's default (config.yaml).
type holdfastConfig struct {
	Listen, Admin string
	Backend       string // MariaDB host:port
	Database      string
	Instances     int // backend.instances; 0: from the fleet's live instances
	TTL           time.Duration
	PoolCap       int
	Replica       string // a replica's host:port ("" none): the catalog tag's reads go to it
}

// proc is c as holdfast's configuration file.
func (c holdfastConfig) proc() holdfastproc.Config {
	more := fmt.Sprintf(`shutdown_grace: 2s
log:
  level: warn
reservation:
  # The TTL rule, scaled down: default_ttl > payment_timeout +
  # callback_retry_window + clock_skew = default_ttl - 500ms.
  payment_timeout: %s
  callback_retry_window: 1s
  clock_skew: 500ms
  default_ttl: %s
  pool_cap: %d
`, c.TTL-2*time.Second, c.TTL, c.PoolCap)
	var replicas []string
	if c.Replica != "" {
		replicas = []string{c.Replica}
		more += "routing:\n  tags: {catalog: replica}\n  check_interval: 50ms\n"
	}
	return holdfastproc.Config{
		Listen: c.Listen,
		Admin:  c.Admin,
		Users:  []holdfastproc.User{{Name: clientUser, Password: clientUser, AuthPlugin: "mysql_native_password"}},
		Backend: holdfastproc.Backend{Address: c.Backend, User: backendUser, Password: backendUser,
			Database: c.Database, Instances: c.Instances, Replicas: replicas},
		Fleet: holdfastproc.Fleet{Database: c.tables()},
		YAML:  more,
	}
}

// tables is the schema of holdfast's tables (fleet.database).
func (c holdfastConfig) tables() string { return tablesDB(c.Database) }

// tablesDB is the schema of holdfast's tables beside database db.
func tablesDB(db string) string { return db + "_hf" }

// holdfast is one holdfast instance: a child process that the harness
// may kill and restart on the same addresses. Its output from every
// incarnation goes to one log file.
type holdfast struct {
	*holdfastproc.Process
	n   int
	cfg holdfastConfig
	log string // path

	mu      sync.Mutex         // guards following
	killed  bool               // the harness ended this incarnation
	recBase map[string]float64 // recoveries of earlier incarnations
	recLast map[string]float64 // last scrape of this incarnation
}

// newHoldfast writes instance n's configuration as dir/name.yaml; its log
// is dir/name.log. It starts nothing.
func newHoldfast(n int, name, bin, dir string, cfg holdfastConfig) (*holdfast, error) {
	h := &holdfast{n: n, cfg: cfg, log: filepath.Join(dir, name+".log"),
		recBase: map[string]float64{}, recLast: map[string]float64{}}
	config := filepath.Join(dir, name+".yaml")
	if err := cfg.proc().Write(config, "written by holdfast-chaos"); err != nil {
		return nil, fmt.Errorf("chaos: %w", err)
	}
	h.Process = holdfastproc.New(holdfastproc.Options{Bin: bin, Config: config, LogPath: h.log,
		Name: fmt.Sprintf("holdfast %d", n), Ready: h.answers})
	return h, nil
}

// migrate runs `holdfast migrate` on the instance's configuration.
func (h *holdfast) migrate(ctx context.Context) error {
	if _, err := h.Migrate(ctx); err != nil {
		return fmt.Errorf("chaos: %w", err)
	}
	return nil
}

// start starts an incarnation and waits until it answers a CALL.
func (h *holdfast) start(ctx context.Context) error {
	h.mu.Lock()
	h.killed = false
	h.mu.Unlock()
	if err := h.Start(ctx); err != nil {
		return fmt.Errorf("chaos: %w", err)
	}
	return nil
}

// answers is the instance's readiness: it answers a CALL.
func (h *holdfast) answers(ctx context.Context) error {
	db, err := sql.Open("mysql", clientDSN(h.cfg.Listen, true, 2*time.Second))
	if err != nil {
		return err
	}
	defer db.Close()
	_, err = db.ExecContext(ctx, "CALL holdfast.availability(1, 1)")
	return err
}

// kill9 ends the incarnation with SIGKILL and waits for it.
func (h *holdfast) kill9() {
	h.mu.Lock()
	h.killed = true
	for k, v := range h.recLast {
		h.recBase[k] += v
	}
	h.recLast = map[string]float64{}
	h.mu.Unlock()
	h.Kill()
}

// stop ends the incarnation with SIGTERM (SIGKILL after 15 s).
func (h *holdfast) stop() {
	h.mu.Lock()
	h.killed = true
	h.mu.Unlock()
	_ = h.Stop(15 * time.Second)
}

const recoveriesMetric = "holdfast_reservation_recoveries_total"

// scrape reads holdfast_reservation_recoveries_total from /metrics into
// the incarnation's last values.
func (h *holdfast) scrape(ctx context.Context) error {
	m, err := holdfastproc.Scrape(ctx, h.cfg.Admin)
	if err != nil {
		return fmt.Errorf("chaos: %w", err)
	}
	rec := m.ByLabel(recoveriesMetric, "procedure")
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
