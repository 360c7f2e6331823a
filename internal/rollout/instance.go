package rollout

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/holdfast-db/holdfast/internal/chaos"
	"github.com/holdfast-db/holdfast/internal/dbtest"
	"github.com/holdfast-db/holdfast/internal/holdfastproc"
)

// The versions, as the report names them.
const (
	versionOld = "N-1"
	versionNew = "N"
)

// Accounts and databases on the private server. holdfast's pool (and its
// own work: no fleet.user, which N−1 does not know) logs in as
// backendUser; the application's tables and, for both versions,
// holdfast's are in appDB (N−1 keeps them in backend.database, and N
// finds them there). Passwords are the names.
const (
	backendUser = "hf_rollout"
	appDB       = "rollout"
)

// instance is one holdfast process of the fleet, N−1 or N, with a pool of
// client connections to it.
type instance struct {
	*holdfastproc.Process
	n             int    // in start order: N−1's first, then N's
	version       string // versionOld or versionNew
	listen, admin string
	log           string
	db            *sql.DB // client pool (ClientUser, text protocol)

	mu       sync.Mutex // guards following
	inflight int        // work the balancer gave it that has not ended
	idle     *sync.Cond // signalled when inflight falls to 0
}

// instanceConfig is an instance's configuration file: the same settings
// for both versions, but N−1's without admin credentials (its parser
// rejects them, and its admin API needs none on loopback).
func instanceConfig(version, listen, admin, backend string, o *Options) holdfastproc.Config {
	return holdfastproc.Config{
		Listen: listen,
		Admin:  admin,
		Users:  []holdfastproc.User{{Name: chaos.ClientUser, Password: chaos.ClientUser, AuthPlugin: "mysql_native_password"}},
		Backend: holdfastproc.Backend{Address: backend, User: backendUser, Password: backendUser,
			Database: appDB},
		// The TTL rule, scaled down as chaos does: default_ttl >
		// payment_timeout + callback_retry_window + clock_skew.
		YAML: fmt.Sprintf(`shutdown_grace: 5s
log:
  level: warn
pool:
  min: 0
  max: 16
reservation:
  payment_timeout: %s
  callback_retry_window: 1s
  clock_skew: 500ms
  default_ttl: %s
  pool_cap: 200
`, o.TTL-2*time.Second, o.TTL),
		NoCredentials: version == versionOld,
	}
}

// newInstance writes instance n's configuration into dir and opens its
// client pool; it starts nothing. ready is its readiness (Process.Start
// waits for it).
func newInstance(n int, version, bin, dir, backend string, o *Options, ready func(*instance) func(context.Context) error) (*instance, error) {
	listen, err := dbtest.ListenAddr()
	if err != nil {
		return nil, err
	}
	admin, err := dbtest.ListenAddr()
	if err != nil {
		return nil, err
	}
	name := fmt.Sprintf("holdfast-%d-%s", n, map[string]string{versionOld: "old", versionNew: "new"}[version])
	config := filepath.Join(dir, name+".yaml")
	if err := instanceConfig(version, listen, admin, backend, o).Write(config, "written by the rollout harness"); err != nil {
		return nil, fmt.Errorf("rollout: %w", err)
	}
	db, err := sql.Open("mysql", chaos.ClientDSN(listen, true, 30*time.Second))
	if err != nil {
		return nil, fmt.Errorf("rollout: %w", err)
	}
	db.SetMaxIdleConns(64)
	in := &instance{n: n, version: version, listen: listen, admin: admin, log: filepath.Join(dir, name+".log"), db: db}
	in.idle = sync.NewCond(&in.mu)
	in.Process = holdfastproc.New(holdfastproc.Options{Bin: bin, Config: config, LogPath: in.log,
		Name: fmt.Sprintf("holdfast %d (%s)", n, version), Ready: ready(in)})
	return in, nil
}

func (in *instance) String() string { return fmt.Sprintf("instance %d (%s)", in.n, in.version) }

// answersCall is N−1's readiness, which has no /readyz: it answers a
// CALL.
func answersCall(in *instance) func(context.Context) error {
	return func(ctx context.Context) error {
		_, err := in.db.ExecContext(ctx, "CALL holdfast.availability(1, 1)")
		return err
	}
}

// readyWithControls is N's readiness, which gates each step of the
// rollout: the instance serves, and the fleet's drain of drainedTag is in
// force on it, so that no client of a ready instance can run a statement
// of that tag. /readyz (200 once the backend answered and the fleet's
// controls were read) says the first, when the binary serves it; a binary
// without it (404) is taken as serving once its client port accepts. The
// drain is read from its /api/controls either way.
func readyWithControls(in *instance) func(context.Context) error {
	return func(ctx context.Context) error {
		switch code, err := httpStatus(ctx, "http://"+in.admin+"/readyz"); {
		case err != nil:
			return err
		case code == http.StatusNotFound:
			if err := holdfastproc.DialReady(in.listen)(ctx); err != nil {
				return err
			}
		case code != http.StatusOK:
			return fmt.Errorf("/readyz answered %d", code)
		}
		cs, err := controlsOf(ctx, in)
		if err != nil {
			return err
		}
		if !cs.has(drainedTag, "drain") {
			return fmt.Errorf("the drain of %s is not in force yet", drainedTag)
		}
		return nil
	}
}

func httpStatus(ctx context.Context, url string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

// controls is what both versions' GET /api/controls answer in common,
// and N's ignored rows (N−1 has none: it does not validate rows when it
// reads them).
type controls struct {
	Fleet    bool      `json:"fleet"`
	Known    bool      `json:"known"`
	Stale    bool      `json:"stale"`
	Controls []control `json:"controls"`
	Ignored  []control `json:"ignored"`
}

type control struct {
	Tag   string `json:"tag"`
	Kind  string `json:"kind"`
	Value int64  `json:"value"`
}

func (cs controls) has(tag, kind string) bool {
	return slices.ContainsFunc(cs.Controls, func(c control) bool { return c.Tag == tag && c.Kind == kind })
}

func (cs controls) ignores(tag, kind string) bool {
	return slices.ContainsFunc(cs.Ignored, func(c control) bool { return c.Tag == tag && c.Kind == kind })
}

func controlsOf(ctx context.Context, in *instance) (controls, error) {
	var cs controls
	err := getJSON(ctx, "http://"+in.admin+"/api/controls", &cs)
	return cs, err
}

// member is a row of N's GET /api/fleet.
type member struct {
	ID        string   `json:"instance_id"`
	Version   string   `json:"version"`
	SchemaMin int      `json:"schema_min"`
	SchemaMax int      `json:"schema_max"`
	Kinds     []string `json:"control_kinds"`
}

// fleetView is what N's GET /api/fleet says of the fleet.
type fleetView struct {
	Fleet  bool `json:"fleet"`
	Status struct {
		Instance          string   `json:"instance_id"`
		Members           []member `json:"members"`
		MembersUnrecorded bool     `json:"members_unrecorded"`
	} `json:"status"`
}

func getJSON(ctx context.Context, url string, v any) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("GET %s: %d %s", url, resp.StatusCode, b)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// adminWrite sends a change to in's admin API. N−1 needs no credential;
// N's write credential is holdfastproc's.
func adminWrite(ctx context.Context, in *instance, method, path string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, "http://"+in.admin+path, nil)
	if err != nil {
		return err
	}
	if in.version == versionNew {
		req.Header.Set("Authorization", "Bearer "+holdfastproc.AdminToken)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("rollout: %s %s on %s: %w", method, path, in, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("rollout: %s %s on %s: %d %s", method, path, in, resp.StatusCode, b)
	}
	return nil
}

// take counts work the balancer gave in; done ends it.
func (in *instance) take() {
	in.mu.Lock()
	in.inflight++
	in.mu.Unlock()
}

func (in *instance) done() {
	in.mu.Lock()
	if in.inflight--; in.inflight == 0 {
		in.idle.Broadcast()
	}
	in.mu.Unlock()
}

// waitIdle waits, up to timeout, until the work the balancer gave in has
// ended (it must have been taken out of the balancer first); it reports
// whether it has.
func (in *instance) waitIdle(timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	stop := time.AfterFunc(timeout, func() {
		in.mu.Lock()
		in.idle.Broadcast()
		in.mu.Unlock()
	})
	defer stop.Stop()
	in.mu.Lock()
	defer in.mu.Unlock()
	for in.inflight > 0 && time.Now().Before(deadline) {
		in.idle.Wait()
	}
	return in.inflight == 0
}

// balancer spreads the clients' work over the ready instances, as a
// Kubernetes Service spreads connections over the ready pods: round
// robin, one unit of work (a transaction, a statement, an order) at a
// time.
type balancer struct {
	mu   sync.Mutex // guards following
	live []*instance
	next int
}

// pick returns the instance for the next unit of work, taken (done ends
// it).
func (b *balancer) pick() *instance {
	b.mu.Lock()
	defer b.mu.Unlock()
	in := b.live[b.next%len(b.live)]
	b.next++
	in.take()
	return in
}

func (b *balancer) add(in *instance) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.live = append(b.live, in)
}

// remove takes in out: no work is given to it from now on.
func (b *balancer) remove(in *instance) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.live = slices.DeleteFunc(b.live, func(x *instance) bool { return x == in })
}
