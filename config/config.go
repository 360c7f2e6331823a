// Package config owns holdfast's typed configuration: the YAML schema, its
// defaults, environment overrides and validation. It does no I/O beyond
// reading the file it is given and the secret files that file names (see
// secrets.go), and starts nothing. It is a leaf: it imports no other package
// of holdfast. The packages it configures take its plain structs as their
// Config (the engine config.Engine, the refiller config.Refiller,
// reservation/legacy config.Redis), and each default is written once, in
// this package's Default functions, which the shipped config.yaml must match
// (completeness_test.go).
package config

import (
	"fmt"
	"net"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Config is the whole of holdfast's configuration. The zero value is not
// usable; start from Default() or Load().
type Config struct {
	// Listen is the MySQL-protocol address clients connect to.
	Listen string `yaml:"listen"`
	// ServerVersion is the version string sent in the handshake. Empty means
	// the backend's own version, learned when the first backend connection
	// opens (with a fixed fallback while the backend is unreachable).
	ServerVersion string `yaml:"server_version"`
	// MaxAllowedPacket is the largest command a client may send, in bytes.
	// Larger ones get error 1153 and the connection is closed, as MySQL does.
	MaxAllowedPacket ByteSize `yaml:"max_allowed_packet"`
	// ShutdownGrace bounds how long SIGTERM waits for open transactions.
	ShutdownGrace time.Duration `yaml:"shutdown_grace"`
	// ShutdownDelay is how long holdfast keeps serving after SIGTERM,
	// unready (/readyz 503), before its client listener closes and idle
	// clients are closed; shutdown_grace starts after it. Zero: none.
	ShutdownDelay time.Duration `yaml:"shutdown_delay"`
	// ReloadWatch is how often the configuration file and the files it
	// names (password_file, cert_file, ...) are read for a change, which
	// is then applied as SIGHUP applies it. Zero: never (SIGHUP and POST
	// /api/reload still reload). Read at start-up.
	ReloadWatch time.Duration `yaml:"reload_watch"`
	// MaxProcs caps the CPUs holdfast runs Go code on at once (GOMAXPROCS).
	// Zero lets holdfast choose at start-up from the CPUs available (or the
	// container's CPU quota), as config.yaml says. Read at start-up.
	MaxProcs int `yaml:"max_procs"`

	TLS         TLS         `yaml:"tls"`
	Users       []User      `yaml:"users"`
	Auth        Auth        `yaml:"auth"`
	Backend     Backend     `yaml:"backend"`
	Pool        Pool        `yaml:"pool"`
	Log         Log         `yaml:"log"`
	Admin       Admin       `yaml:"admin"`
	Sessions    Sessions    `yaml:"sessions"`
	Attribution Attribution `yaml:"attribution"`
	Tags        Tags        `yaml:"tags"`
	Overload    Overload    `yaml:"overload"`
	Routing     Routing     `yaml:"routing"`
	Failover    Failover    `yaml:"failover"`
	Fleet       Fleet       `yaml:"fleet"`
	Reservation Reservation `yaml:"reservation"`
}

// Fleet configures what holdfast instances in front of one database share
// through it (package fleet): on-call controls, membership, fleet-wide
// caps, duty leases.
type Fleet struct {
	// Disabled keeps every on-call control to the instance it is set on,
	// and runs the fleet duties (sweeper, reconciler, ...) on every
	// instance: for one holdfast alone, or experiments.
	Disabled bool `yaml:"disabled"`
	// PollInterval is how often each instance reads the controls: a
	// control set through one instance is in force on the others within
	// it.
	PollInterval time.Duration `yaml:"poll_interval"`
	// TTL is how long an instance that stopped renewing its heartbeat,
	// cap grants and duty leases keeps them: then its share of a
	// fleet-wide cap goes back to the others and its duties are taken
	// over. At least twice poll_interval.
	TTL time.Duration `yaml:"ttl"`
	// ConnectionReserve is how many of the server's max_connections the
	// fleet's pools leave to everyone else (administrators, replication,
	// monitoring): each instance warns (log, metric, status page) when the
	// live instances' Σ pool.max exceeds max_connections less it.
	ConnectionReserve int `yaml:"connection_reserve"`
	// Database is the schema of holdfast's own tables (the fleet's, the
	// engine's, the authority switch, the migrations), apart from the
	// application's backend.database so that grants can keep applications
	// off them. `holdfast migrate` creates it. An install whose tables are
	// still in backend.database (made before this setting) keeps using
	// them there until `holdfast migrate -move-tables`.
	Database string `yaml:"database"`
	// User and Password are the account holdfast's own work connects as:
	// the fleet, the engine's borrows, kills, the replica checks, the
	// reconciler, the authority switch and migrate (see `holdfast migrate
	// -print-grants`). Empty User: backend.user and its password, with a
	// warning at start-up. Read at start-up.
	User     string `yaml:"user"`
	Password string `yaml:"password"`
}

// Own is the account holdfast's own work connects as: fleet.user, or
// backend.user when fleet.user is empty.
func (c *Config) Own() (user, password string) {
	if c.Fleet.User != "" {
		return c.Fleet.User, c.Fleet.Password
	}
	return c.Backend.User, c.Backend.Password
}

// Attribution configures per-tag accounting.
type Attribution struct {
	// Disabled turns per-tag accounting off: nothing is recorded per tag
	// (pool metrics remain). It exists to measure attribution's own cost.
	// On-call controls still apply to the tag a statement carries.
	Disabled bool `yaml:"disabled"`
	// MaxTags bounds distinct tags; new ones past it are counted under
	// "other".
	MaxTags int `yaml:"max_tags"`
	// RetireIdle: when every max_tags slot is taken, a tag with nothing
	// recorded for this long gives its slot to a new tag (least recently
	// active first) and its series leave /metrics. Zero keeps every tag
	// until restart.
	RetireIdle time.Duration `yaml:"retire_idle"`
	// SlowTransaction: a transaction that holds its connection at least
	// this long while executing less than a tenth of that time is counted
	// and logged (rate-limited) with its tag and statement.
	SlowTransaction time.Duration `yaml:"slow_transaction"`
}

// Tags are on-call controls in force from start-up; the admin API changes
// them at run time (those changes survive a reload).
type Tags struct {
	// Drained tags have new work refused.
	Drained []string `yaml:"drained"`
	// Limits caps a tag's concurrent backend connections.
	Limits map[string]int `yaml:"limits"`
	// MaxTransactionTime is a tag's own sessions.max_transaction_time.
	MaxTransactionTime map[string]time.Duration `yaml:"max_transaction_time"`
}

// Overload orders the borrowers waiting for a backend connection by the
// class of their tag when the pool is saturated (proxy/classes.go).
type Overload struct {
	// Classes maps a class (critical, normal, background) to tag patterns
	// (* matches any run of characters). A tag matching none is normal;
	// one matching several takes the first of critical, normal,
	// background.
	Classes map[string][]string `yaml:"classes"`
	// Reserve is how many of pool.max's connections background borrowers
	// never hold (they may always hold one).
	Reserve int `yaml:"reserve"`
	// BackgroundWait is how long a background borrower waits for a
	// connection before it is shed (error 9006); at most the pool's
	// acquire_timeout applies.
	BackgroundWait time.Duration `yaml:"background_wait"`
	// CriticalWait is the wait a critical borrower should never see: waits
	// past it are counted (and alerted on). Critical is never shed.
	CriticalWait time.Duration `yaml:"critical_wait"`
}

// The overload classes, highest first.
var OverloadClasses = []string{"critical", "normal", "background"}

// TLS configures TLS for client connections. Both files empty means no TLS.
type TLS struct {
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	// RSAKeyFile is the PEM private key used to exchange caching_sha2_password
	// passwords over non-TLS connections. Empty means a key generated at start.
	RSAKeyFile string `yaml:"rsa_key_file"`
}

// User is an account clients authenticate as. A user reaches the backend
// as backend.user unless it names a backend account of its own; every
// account's connections come from the one pool, under pool.max.
type User struct {
	Name string `yaml:"name"`
	// Password, like every password and token here, may be given instead
	// as password_file (a file holding it) or password_env (an environment
	// variable holding it); see secrets.go.
	Password string `yaml:"password"`
	// AuthPlugin is mysql_native_password (default) or caching_sha2_password.
	AuthPlugin string `yaml:"auth_plugin"`
	// Admin users may KILL any client's connection or query, not only their own.
	Admin bool `yaml:"admin"`
	// DefaultTag attributes this user's untagged statements (when the
	// connection has no conn_tag attribute).
	DefaultTag string `yaml:"default_tag"`
	// BackendUser is the backend account this user's statements run as,
	// with its own grants; empty: backend.user. Users naming the same
	// account share its connections.
	BackendUser     string `yaml:"backend_user"`
	BackendPassword string `yaml:"backend_password"`
	// BackendPool bounds the backend account's connections within
	// pool.max (needs backend_user).
	BackendPool AccountPool `yaml:"backend_pool"`
	// Tags are the tags this user's statements may carry (patterns, *
	// for any run of characters), by comment, conn_tag connection
	// attribute, prepared statement or CALL holdfast.*; DefaultTag is
	// always allowed. A statement claiming another tag runs as if it
	// carried none (under DefaultTag, or its transaction's tag) and is
	// counted, or is refused under RefuseOtherTags. Empty: any tag, as
	// the client says.
	Tags []string `yaml:"tags"`
	// RefuseOtherTags refuses a statement whose tag is outside Tags
	// (error 9012), and a login whose conn_tag attribute is; false runs
	// it as untagged. Needs Tags.
	RefuseOtherTags bool `yaml:"refuse_other_tags"`
	// MaxClients caps this user's client connections open at once on
	// this instance; past it a login gets error 1040 (0: only
	// sessions.max_clients).
	MaxClients int `yaml:"max_clients"`
}

// AccountPool bounds one backend account's share of the pool. The pool
// keeps connections apart by account and by the client capabilities that
// change the wire format (CLIENT_FOUND_ROWS, CLIENT_LOCAL_FILES, MariaDB's
// extended type info); the bounds apply to each such set in use, which is
// one set when the account's clients use one driver configuration.
type AccountPool struct {
	// Min connections are kept open (0: none).
	Min int `yaml:"min"`
	// Max caps the account's connections (0: only pool.max).
	Max int `yaml:"max"`
}

// Auth configures how clients not listed in users log in, and how failed
// logins are slowed.
type Auth struct {
	FromBackend FromBackend `yaml:"from_backend"`
	// FailureDelay: after a failed login, the next attempt for the same
	// user from the same address waits this long before its password is
	// checked, doubled after each further failure up to MaxFailureDelay; a
	// success clears it (0: no delay). A waiting login holds no handshake
	// slot, so guesses at one user do not slow other users' logins.
	FailureDelay    time.Duration `yaml:"failure_delay"`
	MaxFailureDelay time.Duration `yaml:"max_failure_delay"`
}

// FromBackend lets users that config.yaml does not list log in with their
// backend account's own password, checked against the backend's account
// table (mysql_native_password accounts only), and reach the backend as
// that account.
type FromBackend struct {
	Enabled bool `yaml:"enabled"`
	// LookupUser reads the account table (MariaDB: SELECT on
	// mysql.global_priv); nothing else needs granting to it.
	LookupUser     string `yaml:"lookup_user"`
	LookupPassword string `yaml:"lookup_password"`
	// CacheTTL is how long an account read from the backend is trusted; a
	// password changed in the backend takes effect within it.
	CacheTTL time.Duration `yaml:"cache_ttl"`
	// BackendPoolMax caps each such account's connections within pool.max
	// (0: only pool.max).
	BackendPoolMax int `yaml:"backend_pool_max"`
	// DefaultTag, Tags, RefuseOtherTags and MaxClients are users[]'s, for
	// each user from the backend.
	DefaultTag      string   `yaml:"default_tag"`
	Tags            []string `yaml:"tags"`
	RefuseOtherTags bool     `yaml:"refuse_other_tags"`
	MaxClients      int      `yaml:"max_clients"`
}

// Backend is the one MySQL or MariaDB server holdfast pools connections to.
type Backend struct {
	Address  string `yaml:"address"`
	User     string `yaml:"user"`
	Password string `yaml:"password"`
	// Database is selected on every backend connection when it opens.
	Database string `yaml:"database"`
	// Collation is sent in the backend handshake; clients asking for a
	// different one have it restored per statement.
	Collation   string        `yaml:"collation"`
	DialTimeout time.Duration `yaml:"dial_timeout"`
	// ExchangeTimeout bounds each of holdfast's own exchanges on a backend
	// connection: restoring session state, preparing a statement, reading
	// variables back, resets and pings. A backend that does not answer in
	// time has its connection closed (the client gets 2013).
	ExchangeTimeout time.Duration `yaml:"exchange_timeout"`
	// Instances is how many holdfast instances (sidecars) share this
	// database server; they split its prepared statements between them
	// (see sessions.prepared_statement_share). 0 (the default) derives it
	// from the fleet's live instances (fleet), or 1 with fleet.disabled.
	Instances int `yaml:"instances"`
	// TLS to the backend, for every backend connection holdfast opens.
	TLS BackendTLS `yaml:"tls"`
	// Replicas are read-only copies of the primary (Address), reached with
	// the same accounts, database, collation and TLS, to which routing
	// may send reads. None by default: everything goes to the primary.
	Replicas []Replica `yaml:"replicas"`
}

// Replica is one replica of the primary.
type Replica struct {
	Address string `yaml:"address"`
	// Weight is its share of the reads routed to replicas, among the
	// replicas eligible for a read (default 1).
	Weight int `yaml:"weight"`
	// Max caps its backend connections on this instance (0: pool.max).
	Max int `yaml:"max"`
}

// Routing decides which reads go to replicas (backend.replicas), by tag.
type Routing struct {
	// Tags maps tag patterns (* matches any run of characters) to a
	// policy: primary (the default: everything on the primary), replica
	// (reads that may go to a replica do, once it has applied the
	// session's last write, within max_replica_lag), replica_stale_ok
	// (within max_replica_lag only). A tag matching several patterns takes
	// the first of primary, replica, replica_stale_ok. Untagged statements
	// take their user's default_tag's policy.
	Tags map[string]string `yaml:"tags"`
	// MaxReplicaLag: a replica further behind the primary than this (by
	// GTID position: how long ago the primary had the position the
	// replica has applied) gets no reads until it catches up.
	MaxReplicaLag time.Duration `yaml:"max_replica_lag"`
	// CheckInterval is how often holdfast checks each server, with or
	// without replicas: which one is the primary (read_only, whom it
	// replicates from), its GTID position, a replica down or back.
	CheckInterval time.Duration `yaml:"check_interval"`
}

// Failover bounds the statements held while there is no usable primary (a
// switchover or failover under way, a split brain) or a pause control is
// in force (proxy/failover.go). Reloaded on SIGHUP.
type Failover struct {
	// Hold is how long a statement that needs a backend connection it
	// does not hold yet waits, holding none, for a usable primary (or for
	// a pause to lift) before it is answered 9010. Zero: no holding (9010
	// at once).
	Hold time.Duration `yaml:"hold"`
	// MaxHeld bounds the statements held at once on this instance; one
	// more is answered 9010 at once. Zero: none is held.
	MaxHeld int `yaml:"max_held"`
	// TransactionReplay: a transaction open on a former primary when the
	// primary switched is replayed on the new primary, from its BEGIN,
	// when every answer there is the one the client saw (instead of 9010).
	// Only transactions begun with a plain BEGIN or START TRANSACTION
	// that run typed row statements (proxy/policy.NotReplayable).
	TransactionReplay bool `yaml:"transaction_replay"`
	// TransactionReplayMaxSize bounds a transaction's recorded statement
	// text, per session; a larger one is not replayed.
	TransactionReplayMaxSize ByteSize `yaml:"transaction_replay_max_size"`
}

// Routing policies, in the order a tag matching several takes them.
var RoutingPolicies = []string{"primary", "replica", "replica_stale_ok"}

// BackendTLS configures TLS on backend connections. Modes are named as
// MySQL clients name them: disabled (the default), preferred (TLS when the
// server offers it, else plain TCP), required (TLS, the server's
// certificate not checked), verify_ca (its certificate must chain to
// ca_file, or the system's roots when ca_file is empty), verify_identity
// (verify_ca, and the certificate must name server_name, by default the
// host of backend.address).
type BackendTLS struct {
	Mode       string `yaml:"mode"`
	CAFile     string `yaml:"ca_file"`
	CertFile   string `yaml:"cert_file"` // a client certificate, for servers that ask for one
	KeyFile    string `yaml:"key_file"`
	ServerName string `yaml:"server_name"`
}

// Backend TLS modes.
const (
	TLSDisabled       = "disabled"
	TLSPreferred      = "preferred"
	TLSRequired       = "required"
	TLSVerifyCA       = "verify_ca"
	TLSVerifyIdentity = "verify_identity"
)

// Pool sizes and paces the backend connection pool.
type Pool struct {
	// Min connections are kept open even when idle.
	Min int `yaml:"min"`
	// Max is the hard cap on open backend connections.
	Max int `yaml:"max"`
	// MaxIdle caps idle connections; extra ones are closed on return.
	// 0 means Max (see IdleCap).
	MaxIdle int `yaml:"max_idle"`
	// IdleTimeout closes connections idle longer than this (down to Min).
	IdleTimeout time.Duration `yaml:"idle_timeout"`
	// MaxLifetime recycles connections older than this, each shortened by a
	// random fraction up to LifetimeJitter so they do not expire together.
	MaxLifetime    time.Duration `yaml:"max_lifetime"`
	LifetimeJitter float64       `yaml:"lifetime_jitter"`
	// AcquireTimeout bounds how long a statement waits for a connection.
	AcquireTimeout time.Duration `yaml:"acquire_timeout"`
	// MaxWaiters caps borrowers queued for a connection; past it they fail
	// at once.
	MaxWaiters int `yaml:"max_waiters"`
	// PingAfterIdle sends COM_PING before lending a connection idle longer
	// than this (a cheap socket check runs on every lend regardless).
	PingAfterIdle time.Duration `yaml:"ping_after_idle"`
	// PipelineDepth lets up to this many autocommit SELECTs from different
	// clients share one backend connection, queued in order on it (0: off).
	PipelineDepth int `yaml:"pipeline_depth"`
}

// Log configures structured logging.
type Log struct {
	Level  string `yaml:"level"`  // debug, info, warn, error
	Format string `yaml:"format"` // text or json
}

// Admin configures the HTTP admin and metrics listener. Who may do what
// on it: a request that changes something needs a credential of scope
// write, wherever it comes from; reads need one of scope read or write
// when Listen is not a loopback address, and none on loopback.
type Admin struct {
	// Listen is the admin address; empty disables it.
	Listen string `yaml:"listen"`
	// Credentials are the named bearer tokens the listener accepts
	// ("Authorization: Bearer <token>"); a control records the name of the
	// one that set it. Empty: none but Token and the local one.
	Credentials []AdminCredential `yaml:"credentials"`
	// LocalTokenPath is where holdfast serve writes, at start-up, a fresh
	// random token of the write credential LocalCredential, for holdfastctl
	// on the same machine (mode 0600; a relative path is taken from the
	// configuration file's directory). Empty: no such credential.
	LocalTokenPath string `yaml:"local_token_path"`
	// Token is the credential of configurations written before
	// Credentials: one credential of scope write named TokenCredential
	// (or token_file, token_env: see secrets.go). Empty: none.
	Token string `yaml:"token"`
	// TLS is the listener's certificate; both empty serve plain HTTP,
	// which only a loopback Listen or AllowPlaintext allows.
	TLS AdminTLS `yaml:"tls"`
	// AllowPlaintext lets a Listen that is not loopback serve plain HTTP,
	// for a network where something else encrypts the traffic (a service
	// mesh's sidecar). false: such a Listen needs TLS.
	AllowPlaintext bool `yaml:"allow_plaintext"`
	// Pprof serves Go's profiles at /debug/pprof/ (reads, under the rule
	// above); false (the default) serves none.
	Pprof bool `yaml:"pprof"`
}

// The names of the credentials holdfast makes itself (see Admin).
const (
	TokenCredential = "token" // admin.token
	LocalCredential = "local" // admin.local_token_path
)

// Admin credential scopes.
const (
	ScopeRead  = "read"  // GET, HEAD and OPTIONS requests
	ScopeWrite = "write" // every request
)

// MinTokenLen is the shortest token admin.credentials accept.
const MinTokenLen = 16

// AdminCredential is one named bearer token of the admin listener.
type AdminCredential struct {
	// Name is recorded as the author of what the credential changes
	// (1 to 64 of [A-Za-z0-9_.@-]).
	Name string `yaml:"name"`
	// Scope is read or write.
	Scope string `yaml:"scope"`
	// Token is the secret, at least MinTokenLen bytes; like every token
	// here it may be given as token_file or token_env (secrets.go).
	Token string `yaml:"token"`
}

// AdminTLS is the admin listener's certificate and key (PEM files, read
// at start-up and on SIGHUP).
type AdminTLS struct {
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
}

// AllCredentials is Credentials with Token, when set, as the write
// credential TokenCredential (the local one is holdfast serve's to make).
func (a Admin) AllCredentials() []AdminCredential {
	out := slices.Clone(a.Credentials)
	if a.Token != "" {
		out = append(out, AdminCredential{Name: TokenCredential, Scope: ScopeWrite, Token: a.Token})
	}
	return out
}

// validate checks the admin section; bad is Validate's error maker.
func (a Admin) validate(bad func(field, format string, args ...any) error) error {
	if a.Listen == "" {
		return nil
	}
	if err := checkAddr(a.Listen); err != nil {
		return bad("admin.listen", "%v", err)
	}
	names := map[string]string{} // name -> the field that set it
	if a.Token != "" {
		names[TokenCredential] = "admin.token"
	}
	if a.LocalTokenPath != "" {
		names[LocalCredential] = "admin.local_token_path"
	}
	tokens := map[string]string{}
	for i, c := range a.Credentials {
		f := fmt.Sprintf("admin.credentials[%d]", i)
		if !credentialName(c.Name) {
			return bad(f+".name", "want 1 to 64 of letters, digits and _ . @ -, got %q", c.Name)
		}
		if prev, dup := names[c.Name]; dup {
			return bad(f+".name", "%q is the name of %s too; each credential's name is its own", c.Name, prev)
		}
		names[c.Name] = f
		if c.Scope != ScopeRead && c.Scope != ScopeWrite {
			return bad(f+".scope", "want read or write, got %q", c.Scope)
		}
		if len(c.Token) < MinTokenLen {
			// The token itself is never written in an error.
			return bad(f+".token", "want at least %d characters (e.g. openssl rand -hex 32), got %d", MinTokenLen, len(c.Token))
		}
		if prev, dup := tokens[c.Token]; dup {
			return bad(f+".token", "the same as %s's: each credential needs a token of its own", prev)
		}
		tokens[c.Token] = f
	}
	if a.Token != "" {
		if prev, dup := tokens[a.Token]; dup {
			return bad("admin.token", "the same as %s's: each credential needs a token of its own", prev)
		}
	}
	if (a.TLS.CertFile == "") != (a.TLS.KeyFile == "") {
		return bad("admin.tls", "cert_file and key_file must be set together")
	}
	if !IsLoopback(a.Listen) {
		if len(a.AllCredentials()) == 0 {
			return bad("admin.credentials", "required when admin.listen (%s) is not a loopback address: off loopback every request needs a credential", a.Listen)
		}
		if a.TLS.CertFile == "" && !a.AllowPlaintext {
			return bad("admin.tls", "required when admin.listen (%s) is not a loopback address, or tokens cross the network in clear text: "+
				"set admin.tls.cert_file and key_file, or admin.allow_plaintext: true when something in front encrypts the traffic (a service mesh)", a.Listen)
		}
	}
	return nil
}

// credentialName accepts 1 to 64 of [A-Za-z0-9_.@-]: no '/', which
// separates a credential's name from a free-text author in set_by.
func credentialName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '@' || c == '-') {
			return false
		}
	}
	return true
}

// Sessions configures client-session behaviour.
type Sessions struct {
	// MaxClients caps concurrent client connections; past it a login gets
	// error 1040 (0: no cap). The default bounds what idle clients cost:
	// about 9 KiB each, 23 KiB over TLS (measured by make client-memory),
	// so 10000 hold about 90 MiB (230 MiB over TLS).
	MaxClients int `yaml:"max_clients"`
	// StatementCache is the most prepared statements each backend
	// connection keeps prepared; past it, statements no client holds are
	// closed first, then the least recently used.
	StatementCache int `yaml:"statement_cache"`
	// IdleInTransactionTimeout ends a client that sits idle inside a
	// transaction, holding a backend connection, longer than this: the
	// transaction is rolled back, the connection returned, and the client
	// sent error 4031 and disconnected (0: off).
	IdleInTransactionTimeout time.Duration `yaml:"idle_in_transaction_timeout"`
	// MaxTransactionTime ends a transaction that has held its backend
	// connection longer than this, its running statement interrupted: the
	// client gets error 9005 and is disconnected (0: off). On-call may set
	// it per tag at run time.
	MaxTransactionTime time.Duration `yaml:"max_transaction_time"`
	// ClientWriteTimeout disconnects a client that stops reading its answer
	// for this long; its statement is interrupted and its backend connection
	// reset. A client's own lower net_write_timeout applies instead (0: off).
	ClientWriteTimeout time.Duration `yaml:"client_write_timeout"`
	// PreparedStatementShare is the part of the server's
	// max_prepared_stmt_count that all holdfast instances together may keep
	// prepared (the rest is left to other clients): each backend connection
	// keeps at most share × max_prepared_stmt_count / backend.instances /
	// pool.max, and at most statement_cache.
	PreparedStatementShare float64 `yaml:"prepared_statement_share"`
}

// IdleCap is the most idle connections kept: MaxIdle, or Max when it is 0.
func (p Pool) IdleCap() int {
	if p.MaxIdle == 0 {
		return p.Max
	}
	return p.MaxIdle
}

// Default returns the documented defaults (see config.yaml).
func Default() Config {
	return Config{
		Listen:           "127.0.0.1:6033",
		MaxAllowedPacket: 64 << 20,
		ShutdownGrace:    30 * time.Second,
		Users:            []User{{Name: "app", Password: "app", AuthPlugin: "mysql_native_password"}},
		Backend: Backend{
			Address:         "127.0.0.1:3306",
			User:            "root",
			Database:        "test",
			Collation:       "utf8mb4_general_ci",
			DialTimeout:     5 * time.Second,
			ExchangeTimeout: 10 * time.Second,
			Instances:       0,
			TLS:             BackendTLS{Mode: TLSDisabled},
		},
		Auth: Auth{
			FailureDelay:    500 * time.Millisecond,
			MaxFailureDelay: 8 * time.Second,
			FromBackend:     FromBackend{CacheTTL: 30 * time.Second},
		},
		Pool: Pool{
			Min:            2,
			Max:            16,
			IdleTimeout:    5 * time.Minute,
			MaxLifetime:    time.Hour,
			LifetimeJitter: 0.1,
			AcquireTimeout: 5 * time.Second,
			MaxWaiters:     10000,
			PingAfterIdle:  30 * time.Second,
			PipelineDepth:  16,
		},
		Log:         Log{Level: "info", Format: "text"},
		Admin:       Admin{Listen: "127.0.0.1:6034", LocalTokenPath: "holdfast-admin.token"},
		Sessions:    Sessions{MaxClients: 10000, StatementCache: 1000, PreparedStatementShare: 0.5, ClientWriteTimeout: 30 * time.Second},
		Attribution: Attribution{MaxTags: 200, RetireIdle: time.Hour, SlowTransaction: time.Second},
		Overload:    Overload{Reserve: 4, BackgroundWait: time.Second, CriticalWait: 100 * time.Millisecond},
		Routing:     Routing{MaxReplicaLag: time.Second, CheckInterval: 100 * time.Millisecond},
		Failover:    Failover{Hold: 15 * time.Second, MaxHeld: 1000, TransactionReplayMaxSize: 1 << 20},
		Fleet:       Fleet{PollInterval: time.Second, TTL: 5 * time.Second, ConnectionReserve: 10, Database: "holdfast"},
		Reservation: Reservation{Enabled: true, Engine: DefaultEngine()},
	}
}

// Load reads path (YAML) over the defaults, applies HOLDFAST_* environment
// overrides, and validates. An empty path means defaults plus environment.
func Load(path string) (Config, error) {
	c := Default()
	if path != "" {
		b, err := os.ReadFile(path)
		if err != nil {
			return Config{}, fmt.Errorf("config: %w", err)
		}
		if err := c.parse(b); err != nil {
			return Config{}, err
		}
	}
	c.applyEnv(os.Getenv)
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

// Parse decodes YAML over the defaults and validates; it applies no
// HOLDFAST_* environment overrides (secrets the text itself names with
// _file or _env are read). Unknown fields are errors.
func Parse(b []byte) (Config, error) {
	c := Default()
	if err := c.parse(b); err != nil {
		return Config{}, err
	}
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

func (c *Config) parse(b []byte) error {
	var root yaml.Node
	if err := yaml.Unmarshal(b, &root); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	if root.Kind == 0 {
		return nil // an empty file: the defaults
	}
	// The tree is checked for unknown keys, has its bare 0 durations made
	// "0s" and its secrets read from the files and variables it names
	// (see checkTree), then decoded; nodes keep their line numbers, so
	// errors point into the file as written.
	if err := checkTree(&root, reflect.TypeOf(c)); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	if err := root.Decode(c); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	return nil
}

// applyEnv lets the run scripts point holdfast at a private MariaDB without
// editing the file.
func (c *Config) applyEnv(get func(string) string) {
	if v := get("HOLDFAST_LISTEN"); v != "" {
		c.Listen = v
	}
	if v := get("HOLDFAST_ADMIN_LISTEN"); v != "" {
		c.Admin.Listen = v
	}
	if v := get("HOLDFAST_BACKEND_ADDRESS"); v != "" {
		c.Backend.Address = v
	}
	if v := get("HOLDFAST_BACKEND_USER"); v != "" {
		c.Backend.User = v
	}
	if v, ok := lookup(get, "HOLDFAST_BACKEND_PASSWORD"); ok {
		c.Backend.Password = v
	}
	if v := get("HOLDFAST_BACKEND_DATABASE"); v != "" {
		c.Backend.Database = v
	}
	if v := get("HOLDFAST_FLEET_DATABASE"); v != "" {
		c.Fleet.Database = v
	}
	if v := get("HOLDFAST_FLEET_USER"); v != "" {
		c.Fleet.User = v
	}
	if v, ok := lookup(get, "HOLDFAST_FLEET_PASSWORD"); ok {
		c.Fleet.Password = v
	}
}

func lookup(get func(string) string, k string) (string, bool) {
	v := get(k)
	if v != "" {
		return v, true
	}
	_, ok := os.LookupEnv(k)
	return "", ok
}

// fieldError returns the error maker of a Validate: prefix, the field's
// name, and what is wrong with it.
func fieldError(prefix string) func(field, format string, a ...any) error {
	return func(field, format string, a ...any) error {
		return fmt.Errorf("%s%s: %s", prefix, field, fmt.Sprintf(format, a...))
	}
}

// Validate checks every field and names the first bad one.
func (c *Config) Validate() error {
	bad := fieldError("config: ")
	if err := checkAddr(c.Listen); err != nil {
		return bad("listen", "%v", err)
	}
	if err := c.Admin.validate(bad); err != nil {
		return err
	}
	if c.MaxProcs < 0 {
		return bad("max_procs", "must not be negative (0: Go's default), got %d", c.MaxProcs)
	}
	if c.MaxAllowedPacket < 1024 || c.MaxAllowedPacket > 1<<30 {
		return bad("max_allowed_packet", "must be between 1KiB and 1GiB, got %d", c.MaxAllowedPacket)
	}
	if c.ShutdownGrace < 0 {
		return bad("shutdown_grace", "must not be negative")
	}
	if c.ShutdownDelay < 0 {
		return bad("shutdown_delay", "must not be negative (0: none), got %v", c.ShutdownDelay)
	}
	if c.ReloadWatch != 0 && c.ReloadWatch < time.Second {
		return bad("reload_watch", "must be 0 (off) or at least 1s, got %v", c.ReloadWatch)
	}
	if c.Fleet.PollInterval <= 0 || c.Fleet.PollInterval > time.Minute {
		return bad("fleet.poll_interval", "must be positive and at most 1m, got %v", c.Fleet.PollInterval)
	}
	if c.Fleet.ConnectionReserve < 0 {
		return bad("fleet.connection_reserve", "must not be negative, got %d", c.Fleet.ConnectionReserve)
	}
	if c.Fleet.TTL < 2*c.Fleet.PollInterval {
		return bad("fleet.ttl", "must be at least twice fleet.poll_interval (%v), got %v", c.Fleet.PollInterval, c.Fleet.TTL)
	}
	if err := checkSchemaName(c.Fleet.Database); err != nil {
		return bad("fleet.database", "%v", err)
	}
	if c.Fleet.User == "" && c.Fleet.Password != "" {
		return bad("fleet.password", "set without fleet.user")
	}
	if (c.TLS.CertFile == "") != (c.TLS.KeyFile == "") {
		return bad("tls", "cert_file and key_file must be set together")
	}
	if len(c.Users) == 0 {
		return bad("users", "at least one user is required")
	}
	seen := map[string]bool{}
	for i, u := range c.Users {
		f := fmt.Sprintf("users[%d]", i)
		if u.Name == "" {
			return bad(f+".name", "must not be empty")
		}
		if seen[u.Name] {
			return bad(f+".name", "duplicate user %q", u.Name)
		}
		seen[u.Name] = true
		switch u.AuthPlugin {
		case "", "mysql_native_password", "caching_sha2_password":
		default:
			return bad(f+".auth_plugin", "must be mysql_native_password or caching_sha2_password, got %q", u.AuthPlugin)
		}
		if err := c.validateAccount(f, i); err != nil {
			return err
		}
		if err := c.validateUserBounds(f, u.Tags, u.RefuseOtherTags, u.MaxClients); err != nil {
			return err
		}
	}
	if err := c.validateAuth(); err != nil {
		return err
	}
	if err := checkAddr(c.Backend.Address); err != nil {
		return bad("backend.address", "%v", err)
	}
	if c.Backend.User == "" {
		return bad("backend.user", "must not be empty")
	}
	if c.Backend.Collation == "" {
		return bad("backend.collation", "must not be empty")
	}
	if c.Backend.DialTimeout <= 0 {
		return bad("backend.dial_timeout", "must be positive")
	}
	if err := c.Backend.TLS.validate(); err != nil {
		return err
	}
	p := c.Pool
	switch {
	case p.Max < 1:
		return bad("pool.max", "must be at least 1, got %d", p.Max)
	case p.Min < 0 || p.Min > p.Max:
		return bad("pool.min", "must be between 0 and pool.max (%d), got %d", p.Max, p.Min)
	case p.MaxIdle != 0 && (p.MaxIdle < p.Min || p.MaxIdle > p.Max):
		return bad("pool.max_idle", "must be 0 (pool.max) or between pool.min (%d) and pool.max (%d), got %d", p.Min, p.Max, p.MaxIdle)
	case p.IdleTimeout <= 0:
		return bad("pool.idle_timeout", "must be positive")
	case p.MaxLifetime <= 0:
		return bad("pool.max_lifetime", "must be positive")
	case p.LifetimeJitter < 0 || p.LifetimeJitter >= 1:
		return bad("pool.lifetime_jitter", "must be in [0, 1), got %v", p.LifetimeJitter)
	case p.AcquireTimeout <= 0:
		return bad("pool.acquire_timeout", "must be positive")
	case p.MaxWaiters < 0:
		return bad("pool.max_waiters", "must not be negative")
	case p.PingAfterIdle < 0:
		return bad("pool.ping_after_idle", "must not be negative")
	case p.PipelineDepth < 0 || p.PipelineDepth > 256:
		return bad("pool.pipeline_depth", "must be between 0 (off) and 256, got %d", p.PipelineDepth)
	}
	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		return bad("log.level", "must be debug, info, warn or error, got %q", c.Log.Level)
	}
	switch c.Log.Format {
	case "text", "json":
	default:
		return bad("log.format", "must be text or json, got %q", c.Log.Format)
	}
	if c.Sessions.MaxClients < 0 {
		return bad("sessions.max_clients", "must not be negative")
	}
	if c.Sessions.StatementCache < 1 {
		return bad("sessions.statement_cache", "must be at least 1, got %d", c.Sessions.StatementCache)
	}
	if s := c.Sessions.PreparedStatementShare; s <= 0 || s > 1 {
		return bad("sessions.prepared_statement_share", "must be in (0, 1], got %v", s)
	}
	if c.Sessions.IdleInTransactionTimeout < 0 || c.Sessions.MaxTransactionTime < 0 || c.Sessions.ClientWriteTimeout < 0 {
		return bad("sessions", "idle_in_transaction_timeout, max_transaction_time and client_write_timeout must not be negative (0: off)")
	}
	if c.Backend.ExchangeTimeout <= 0 {
		return bad("backend.exchange_timeout", "must be positive")
	}
	if c.Backend.Instances < 0 {
		return bad("backend.instances", "must be 0 (derived from the fleet) or more, got %d", c.Backend.Instances)
	}
	if c.Attribution.MaxTags < 1 {
		return bad("attribution.max_tags", "must be at least 1, got %d", c.Attribution.MaxTags)
	}
	if c.Attribution.RetireIdle < 0 {
		return bad("attribution.retire_idle", "must not be negative (0 keeps every tag)")
	}
	if c.Attribution.SlowTransaction <= 0 {
		return bad("attribution.slow_transaction", "must be positive")
	}
	for i, t := range c.Tags.Drained {
		if !validTag(t) {
			return bad(fmt.Sprintf("tags.drained[%d]", i), "%q is not a tag (letters, digits and _ . : - only, at most 64)", t)
		}
	}
	if c.Reservation.Enabled {
		if err := c.Reservation.Engine.Validate(); err != nil {
			return fmt.Errorf("config: %w", err)
		}
		if err := c.Reservation.Redis.Validate(); err != nil {
			return fmt.Errorf("config: %w", err)
		}
		if err := c.Reservation.Refiller.Validate(); err != nil {
			return fmt.Errorf("config: %w", err)
		}
		if rc, fc := c.Reservation.PoolCap, c.Reservation.Refiller.PoolCap; rc != fc && rc != 0 && fc != 0 {
			return bad("reservation.refiller.pool_cap", "%d must equal reservation.pool_cap %d", fc, rc)
		}
	}
	for t, n := range c.Tags.Limits {
		if !validTag(t) {
			return bad("tags.limits", "%q is not a tag (letters, digits and _ . : - only, at most 64)", t)
		}
		if n < 1 {
			return bad("tags.limits."+t, "must be at least 1, got %d", n)
		}
	}
	for class, pats := range c.Overload.Classes {
		if !slices.Contains(OverloadClasses, class) {
			return bad("overload.classes", "%q is not a class (critical, normal or background)", class)
		}
		for _, p := range pats {
			if !ValidTagPattern(p) {
				return bad("overload.classes."+class, "%q is not a tag pattern (a tag, with * for any run of characters)", p)
			}
		}
	}
	if c.Overload.Reserve < 0 {
		return bad("overload.reserve", "must be 0 or more, got %d", c.Overload.Reserve)
	}
	if c.Overload.BackgroundWait <= 0 {
		return bad("overload.background_wait", "must be positive, got %v", c.Overload.BackgroundWait)
	}
	if c.Overload.CriticalWait <= 0 {
		return bad("overload.critical_wait", "must be positive, got %v", c.Overload.CriticalWait)
	}
	for i, r := range c.Backend.Replicas {
		field := fmt.Sprintf("backend.replicas[%d]", i)
		if _, _, err := net.SplitHostPort(r.Address); err != nil {
			return bad(field+".address", "want host:port, got %q", r.Address)
		}
		if r.Address == c.Backend.Address {
			return bad(field+".address", "%q is the primary (backend.address)", r.Address)
		}
		if r.Weight < 0 || r.Max < 0 {
			return bad(field, "weight and max must be 0 or more, got %d and %d", r.Weight, r.Max)
		}
	}
	for pat, pol := range c.Routing.Tags {
		if !ValidTagPattern(pat) {
			return bad("routing.tags", "%q is not a tag pattern (a tag, with * for any run of characters)", pat)
		}
		if !slices.Contains(RoutingPolicies, pol) {
			return bad("routing.tags."+pat, "%q is not a policy (primary, replica or replica_stale_ok)", pol)
		}
	}
	if c.Routing.MaxReplicaLag <= 0 {
		return bad("routing.max_replica_lag", "must be positive, got %v", c.Routing.MaxReplicaLag)
	}
	if c.Routing.CheckInterval <= 0 {
		return bad("routing.check_interval", "must be positive, got %v", c.Routing.CheckInterval)
	}
	if c.Failover.Hold < 0 {
		return bad("failover.hold", "must be 0 (no holding) or positive, got %v", c.Failover.Hold)
	}
	if c.Failover.MaxHeld < 0 {
		return bad("failover.max_held", "must be 0 (none held) or more, got %d", c.Failover.MaxHeld)
	}
	if c.Failover.TransactionReplayMaxSize <= 0 {
		return bad("failover.transaction_replay_max_size", "must be positive, got %d", c.Failover.TransactionReplayMaxSize)
	}
	for t, d := range c.Tags.MaxTransactionTime {
		if !validTag(t) {
			return bad("tags.max_transaction_time", "%q is not a tag (letters, digits and _ . : - only, at most 64)", t)
		}
		if d <= 0 {
			return bad("tags.max_transaction_time."+t, "must be positive, got %v", d)
		}
	}
	return nil
}

// validateAccount checks users[i]'s backend account (f names it).
func (c *Config) validateAccount(f string, i int) error {
	u := c.Users[i]
	if u.BackendUser == "" {
		if u.BackendPassword != "" || u.BackendPool != (AccountPool{}) {
			return fmt.Errorf("config: %s.backend_user: must be set with backend_password or backend_pool", f)
		}
		return nil
	}
	if p := u.BackendPool; p.Min < 0 || p.Max < 0 || p.Max > c.Pool.Max || (p.Max > 0 && p.Min > p.Max) || p.Min > c.Pool.Max {
		return fmt.Errorf("config: %s.backend_pool: min %d and max %d must be between 0 and pool.max (%d), min at most max", f, p.Min, p.Max, c.Pool.Max)
	}
	for j, v := range c.Users[:i] {
		if v.BackendUser == u.BackendUser && (v.BackendPassword != u.BackendPassword || v.BackendPool != u.BackendPool) {
			return fmt.Errorf("config: %s: backend_user %q is also users[%d]'s, with another backend_password or backend_pool", f, u.BackendUser, j)
		}
	}
	return nil
}

// validateUserBounds checks a user's tags, refuse_other_tags and
// max_clients (f names the user: users[i] or auth.from_backend).
func (c *Config) validateUserBounds(f string, tags []string, refuse bool, maxClients int) error {
	for j, p := range tags {
		if !ValidTagPattern(p) {
			return fmt.Errorf("config: %s.tags[%d]: %q is not a tag pattern (a tag, with * for any run of characters)", f, j, p)
		}
	}
	if refuse && len(tags) == 0 {
		return fmt.Errorf("config: %s.refuse_other_tags: needs tags (the tags the user may carry)", f)
	}
	if maxClients < 0 {
		return fmt.Errorf("config: %s.max_clients: must not be negative (0: only sessions.max_clients), got %d", f, maxClients)
	}
	if m := c.Sessions.MaxClients; m > 0 && maxClients > m {
		return fmt.Errorf("config: %s.max_clients: %d is more than sessions.max_clients (%d)", f, maxClients, m)
	}
	return nil
}

func (c *Config) validateAuth() error {
	a := c.Auth
	if a.FailureDelay < 0 {
		return fmt.Errorf("config: auth.failure_delay: must not be negative (0: no delay)")
	}
	if a.MaxFailureDelay < a.FailureDelay || a.MaxFailureDelay > 30*time.Second {
		return fmt.Errorf("config: auth.max_failure_delay: must be between auth.failure_delay (%v) and 30s, got %v", a.FailureDelay, a.MaxFailureDelay)
	}
	fb := a.FromBackend
	if err := c.validateUserBounds("auth.from_backend", fb.Tags, fb.RefuseOtherTags, fb.MaxClients); err != nil {
		return err
	}
	if !fb.Enabled {
		return nil
	}
	switch {
	case fb.LookupUser == "":
		return fmt.Errorf("config: auth.from_backend.lookup_user: required when from_backend is enabled")
	case fb.CacheTTL <= 0:
		return fmt.Errorf("config: auth.from_backend.cache_ttl: must be positive")
	case fb.BackendPoolMax < 0 || fb.BackendPoolMax > c.Pool.Max:
		return fmt.Errorf("config: auth.from_backend.backend_pool_max: must be between 0 and pool.max (%d), got %d", c.Pool.Max, fb.BackendPoolMax)
	}
	return nil
}

func (t BackendTLS) validate() error {
	switch t.Mode {
	case TLSDisabled, TLSPreferred, TLSRequired, TLSVerifyCA, TLSVerifyIdentity:
	default:
		return fmt.Errorf("config: backend.tls.mode: must be disabled, preferred, required, verify_ca or verify_identity, got %q", t.Mode)
	}
	switch {
	case (t.CertFile == "") != (t.KeyFile == ""):
		return fmt.Errorf("config: backend.tls: cert_file and key_file must be set together")
	case t.Mode == TLSDisabled && (t.CAFile != "" || t.CertFile != "" || t.ServerName != ""):
		return fmt.Errorf("config: backend.tls.mode: is disabled, yet ca_file, cert_file or server_name is set")
	case t.CAFile != "" && t.Mode != TLSVerifyCA && t.Mode != TLSVerifyIdentity:
		// MySQL clients differ on what a CA means in these modes; holdfast
		// refuses rather than seem to verify what it does not.
		return fmt.Errorf("config: backend.tls.ca_file: mode %s does not check the server's certificate; use verify_ca or verify_identity", t.Mode)
	case t.ServerName != "" && t.Mode != TLSVerifyIdentity:
		return fmt.Errorf("config: backend.tls.server_name: only verify_identity checks the name")
	}
	return nil
}

// ValidTagPattern reports whether p is a tag in which * stands for any run
// of characters (a lone * matches every tag).
func ValidTagPattern(p string) bool {
	return p == "*" || validTag(strings.ReplaceAll(p, "*", "x"))
}

// validTag reports whether t is a tag as holdfast records it.
func validTag(t string) bool {
	if t == "" || len(t) > 64 {
		return false
	}
	for i := 0; i < len(t); i++ {
		c := t[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == ':' || c == '-') {
			return false
		}
	}
	return true
}

// checkSchemaName accepts a database name holdfast can quote and put in
// its statements as it is: 1 to 64 letters, digits, '_', '$' or '-'.
func checkSchemaName(name string) error {
	if name == "" || len(name) > 64 {
		return fmt.Errorf("want a database name of 1 to 64 characters, got %q", name)
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '$' || r == '-') {
			return fmt.Errorf("%q: only letters, digits, '_', '$' and '-' are accepted", name)
		}
	}
	return nil
}

func checkAddr(a string) error {
	_, port, err := net.SplitHostPort(a)
	if err != nil {
		return fmt.Errorf("want host:port, got %q", a)
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("bad port in %q", a)
	}
	return nil
}

// IsLoopback reports whether the host of addr is a loopback address or
// "localhost".
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// ByteSize is a size in bytes that YAML may write as a number or with a
// unit: 512KiB, 64MiB, 1GiB (also KB/MB/GB, meaning the same powers of two).
type ByteSize int64

// UnmarshalYAML implements yaml.Unmarshaler.
func (b *ByteSize) UnmarshalYAML(n *yaml.Node) error {
	v, err := ParseByteSize(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: %w", n.Line, err)
	}
	*b = v
	return nil
}

// ParseByteSize parses "1048576", "64MiB", "1 GiB".
func ParseByteSize(s string) (ByteSize, error) {
	t := strings.TrimSpace(s)
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"KB", 1 << 10}, {"MB", 1 << 20}, {"GB", 1 << 30}, {"B", 1}} {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSpace(strings.TrimSuffix(t, u.suffix)), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("bad size %q (want e.g. 16777216 or 64MiB)", s)
	}
	return ByteSize(n * mult), nil
}
