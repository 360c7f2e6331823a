package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	good := []struct {
		name, yaml string
		check      func(Config) bool
	}{
		{"empty file is the defaults", "", func(c Config) bool { return c.Listen == "127.0.0.1:6033" && c.Pool.Max == 16 }},
		{"durations and sizes", "pool:\n  acquire_timeout: 250ms\nmax_allowed_packet: 32MiB\n", func(c Config) bool {
			return c.Pool.AcquireTimeout == 250*time.Millisecond && c.MaxAllowedPacket == 32<<20
		}},
		{"a smaller pool.max alone", "pool:\n  max: 8\n", func(c Config) bool { return c.Pool.Max == 8 && c.Pool.IdleCap() == 8 }},
		{"plain byte count", "max_allowed_packet: 1048576\n", func(c Config) bool { return c.MaxAllowedPacket == 1<<20 }},
		{"users replace the default", "users:\n  - name: a\n    password: x\n    auth_plugin: caching_sha2_password\n", func(c Config) bool {
			return len(c.Users) == 1 && c.Users[0].AuthPlugin == "caching_sha2_password"
		}},
		{"admin off loopback with a token, in a mesh", "admin:\n  listen: 0.0.0.0:6034\n  token: s3cret\n  allow_plaintext: true\n", func(c Config) bool {
			cs := c.Admin.AllCredentials()
			return len(cs) == 1 && cs[0] == AdminCredential{Name: TokenCredential, Scope: ScopeWrite, Token: "s3cret"}
		}},
		{"admin off loopback with credentials and TLS", "admin:\n  listen: 0.0.0.0:6034\n  credentials:\n    - {name: oncall, scope: write, token: 0123456789abcdef}\n" +
			"    - {name: prometheus, scope: read, token: fedcba9876543210}\n  tls: {cert_file: a.pem, key_file: a.key}\n", func(c Config) bool {
			return len(c.Admin.AllCredentials()) == 2 && c.Admin.Credentials[1].Scope == ScopeRead && c.Admin.TLS.KeyFile == "a.key"
		}},
		{"a bare 0 for a duration means zero", "attribution:\n  retire_idle: 0\npool:\n  ping_after_idle: 0\n", func(c Config) bool {
			return c.Attribution.RetireIdle == 0 && c.Pool.PingAfterIdle == 0
		}},
		{"inline engine settings", "reservation:\n  pool_cap: 500\n  refiller:\n    pool_cap: 500\n", func(c Config) bool { return c.Reservation.PoolCap == 500 }},
		{"the shipped config.yaml", mustRead(t, "../config.yaml"), func(c Config) bool { return c.Backend.Database == "test" }},
		{"backend tls", "backend:\n  tls:\n    mode: verify_identity\n    ca_file: ca.pem\n    server_name: db.internal\n", func(c Config) bool {
			return c.Backend.TLS == BackendTLS{Mode: TLSVerifyIdentity, CAFile: "ca.pem", ServerName: "db.internal"}
		}},
		{"a backend account per user", "users:\n  - name: r\n    password: r\n    backend_user: ro\n    backend_password: x\n    backend_pool: {min: 1, max: 2}\n  - name: s\n    backend_user: ro\n    backend_password: x\n    backend_pool: {min: 1, max: 2}\n", func(c Config) bool {
			return c.Users[1].BackendUser == "ro" && c.Users[0].BackendPool == AccountPool{Min: 1, Max: 2}
		}},
		{"holdfast's own schema and account", "fleet:\n  database: hf_tables\n  user: holdfast_fleet\n  password: pw\n", func(c Config) bool {
			u, pw := c.Own()
			return c.Fleet.Database == "hf_tables" && u == "holdfast_fleet" && pw == "pw"
		}},
		{"without fleet.user holdfast's own account is backend.user", "backend:\n  user: app\n  password: apw\n", func(c Config) bool {
			u, pw := c.Own()
			return c.Fleet.Database == "holdfast" && u == "app" && pw == "apw"
		}},
		{"users from the backend", "auth:\n  from_backend:\n    enabled: true\n    lookup_user: look\n    cache_ttl: 5s\n  failure_delay: 0\n", func(c Config) bool {
			return c.Auth.FromBackend.Enabled && c.Auth.FromBackend.CacheTTL == 5*time.Second && c.Auth.FailureDelay == 0
		}},
		{"failover defaults", "", func(c Config) bool { return c.Failover.Hold == 15*time.Second && c.Failover.MaxHeld == 1000 }},
		{"failover without holding", "failover:\n  hold: 0\n  max_held: 0\n", func(c Config) bool { return c.Failover.Hold == 0 && c.Failover.MaxHeld == 0 }},
		{"transaction replay", "failover:\n  transaction_replay: true\n  transaction_replay_max_size: 64KiB\n", func(c Config) bool {
			return c.Failover.TransactionReplay && c.Failover.TransactionReplayMaxSize == 64<<10
		}},
		{"sessions.max_clients left out is bounded", "sessions:\n  statement_cache: 10\n", func(c Config) bool { return c.Sessions.MaxClients == 10000 }},
		{"sessions.max_clients 0 is no cap", "sessions:\n  max_clients: 0\n", func(c Config) bool { return c.Sessions.MaxClients == 0 }},
		{"a user's tags and bound", "users:\n  - name: r\n    default_tag: report\n    tags: [\"report_*\", export]\n    refuse_other_tags: true\n    max_clients: 20\n", func(c Config) bool {
			u := c.Users[0]
			return len(u.Tags) == 2 && u.Tags[0] == "report_*" && u.RefuseOtherTags && u.MaxClients == 20
		}},
		{"tags and a bound for users from the backend", "auth:\n  from_backend:\n    enabled: true\n    lookup_user: look\n    default_tag: team\n    tags: [\"team_*\"]\n    max_clients: 5\n", func(c Config) bool {
			fb := c.Auth.FromBackend
			return fb.DefaultTag == "team" && fb.Tags[0] == "team_*" && !fb.RefuseOtherTags && fb.MaxClients == 5
		}},
	}
	for _, tc := range good {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse([]byte(tc.yaml))
			if err != nil {
				t.Fatal(err)
			}
			if !tc.check(c) {
				t.Fatalf("unexpected config %+v", c)
			}
		})
	}

	bad := []struct{ name, yaml, want string }{
		{"unknown field", "pool:\n  maximum: 3\n", "field maximum not found"},
		{"unknown field named by its line", "pool:\n  max: 3\n\n\n  maximum: 3\n", "config: line 5: field maximum not found in type config.Pool"},
		{"unknown inline field", "reservation:\n  pool_capacity: 3\n", "field pool_capacity not found"},
		{"a bare non-zero number is no duration", "pool:\n  acquire_timeout: 30\n", "into time.Duration"},
		{"pool max zero", "pool:\n  max: 0\n", "config: pool.max: must be at least 1"},
		{"min over max", "pool:\n  min: 9\n  max: 4\n  max_idle: 4\n", "config: pool.min: must be between 0 and pool.max (4), got 9"},
		{"bad duration", "pool:\n  acquire_timeout: soon\n", "config:"},
		{"negative waiters", "pool:\n  max_waiters: -1\n", "config: pool.max_waiters"},
		{"jitter", "pool:\n  lifetime_jitter: 1.5\n", "config: pool.lifetime_jitter"},
		{"listen without port", "listen: localhost\n", "config: listen: want host:port"},
		{"bad size", "max_allowed_packet: lots\n", "bad size \"lots\""},
		{"packet too small", "max_allowed_packet: 10\n", "config: max_allowed_packet"},
		{"no users", "users: []\n", "config: users: at least one user"},
		{"duplicate user", "users:\n  - name: a\n  - name: a\n", "config: users[1].name: duplicate user \"a\""},
		{"bad plugin", "users:\n  - name: a\n    auth_plugin: sha256_password\n", "config: users[0].auth_plugin"},
		{"admin off loopback without a credential", "admin:\n  listen: 0.0.0.0:6034\n  allow_plaintext: true\n", "config: admin.credentials: required when admin.listen (0.0.0.0:6034) is not a loopback address"},
		{"admin off loopback in clear text", "admin:\n  listen: 0.0.0.0:6034\n  token: s3cret\n", "config: admin.tls: required when admin.listen (0.0.0.0:6034) is not a loopback address"},
		{"admin tls half set", "admin:\n  tls: {cert_file: a.pem}\n", "config: admin.tls: cert_file and key_file"},
		{"credential without a name", "admin:\n  credentials:\n    - {scope: write, token: 0123456789abcdef}\n", "config: admin.credentials[0].name: want 1 to 64"},
		{"credential name with a slash", "admin:\n  credentials:\n    - {name: a/b, scope: write, token: 0123456789abcdef}\n", `config: admin.credentials[0].name: want 1 to 64 of letters, digits and _ . @ -, got "a/b"`},
		{"credential named as the local one", "admin:\n  credentials:\n    - {name: local, scope: write, token: 0123456789abcdef}\n", `config: admin.credentials[0].name: "local" is the name of admin.local_token_path too`},
		{"credential named as admin.token's", "admin:\n  token: x\n  credentials:\n    - {name: token, scope: read, token: 0123456789abcdef}\n", `config: admin.credentials[0].name: "token" is the name of admin.token too`},
		{"duplicate credential name", "admin:\n  credentials:\n    - {name: a, scope: write, token: 0123456789abcdef}\n    - {name: a, scope: read, token: 0123456789abcdeX}\n", `config: admin.credentials[1].name: "a" is the name of admin.credentials[0] too`},
		{"credential scope", "admin:\n  credentials:\n    - {name: a, scope: admin, token: 0123456789abcdef}\n", `config: admin.credentials[0].scope: want read or write, got "admin"`},
		{"credential without scope", "admin:\n  credentials:\n    - {name: a, token: 0123456789abcdef}\n", `config: admin.credentials[0].scope: want read or write, got ""`},
		{"short credential token", "admin:\n  credentials:\n    - {name: a, scope: read, token: short}\n", "config: admin.credentials[0].token: want at least 16 characters (e.g. openssl rand -hex 32), got 5"},
		{"shared credential token", "admin:\n  credentials:\n    - {name: a, scope: read, token: 0123456789abcdef}\n    - {name: b, scope: write, token: 0123456789abcdef}\n", "config: admin.credentials[1].token: the same as admin.credentials[0]'s"},
		{"admin.token shared with a credential", "admin:\n  token: 0123456789abcdef\n  credentials:\n    - {name: a, scope: read, token: 0123456789abcdef}\n", "config: admin.token: the same as admin.credentials[0]'s"},
		{"tls half set", "tls:\n  cert_file: a.pem\n", "config: tls: cert_file and key_file"},
		{"negative failover hold", "failover:\n  hold: -1s\n", "config: failover.hold: must be 0 (no holding) or positive, got -1s"},
		{"negative max_held", "failover:\n  max_held: -5\n", "config: failover.max_held: must be 0 (none held) or more, got -5"},
		{"transaction_replay_max_size 0", "failover:\n  transaction_replay_max_size: 0\n", "config: failover.transaction_replay_max_size: must be positive, got 0"},
		{"log level", "log:\n  level: chatty\n", "config: log.level"},
		{"statement cache", "sessions:\n  statement_cache: 0\n", "config: sessions.statement_cache"},
		{"negative max_procs", "max_procs: -1\n", "config: max_procs"},
		{"negative retire_idle", "attribution:\n  retire_idle: -1s\n", "config: attribution.retire_idle"},
		{"backend tls mode", "backend:\n  tls:\n    mode: on\n", "config: backend.tls.mode: must be disabled, preferred"},
		{"a CA that would not be checked", "backend:\n  tls:\n    mode: required\n    ca_file: ca.pem\n", "config: backend.tls.ca_file: mode required does not check"},
		{"backend client cert half set", "backend:\n  tls:\n    mode: required\n    cert_file: c.pem\n", "config: backend.tls: cert_file and key_file"},
		{"server name without verify_identity", "backend:\n  tls:\n    mode: verify_ca\n    server_name: x\n", "config: backend.tls.server_name"},
		{"backend password without user", "users:\n  - name: a\n    backend_password: x\n", "config: users[0].backend_user: must be set"},
		{"account pool over pool.max", "users:\n  - name: a\n    backend_user: b\n    backend_pool: {max: 99}\n", "config: users[0].backend_pool"},
		{"one account two passwords", "users:\n  - name: a\n    backend_user: b\n    backend_password: x\n  - name: c\n    backend_user: b\n    backend_password: y\n", "config: users[1]: backend_user \"b\" is also users[0]'s"},
		{"a tag pattern that is no tag", "users:\n  - name: a\n  - name: r\n    tags: [\"report *\"]\n", "config: users[1].tags[0]: \"report *\" is not a tag pattern"},
		{"refuse_other_tags without tags", "users:\n  - name: a\n    refuse_other_tags: true\n", "config: users[0].refuse_other_tags: needs tags"},
		{"negative user max_clients", "users:\n  - name: a\n    max_clients: -1\n", "config: users[0].max_clients: must not be negative"},
		{"user max_clients over sessions.max_clients", "sessions:\n  max_clients: 10\nusers:\n  - name: a\n    max_clients: 11\n", "config: users[0].max_clients: 11 is more than sessions.max_clients (10)"},
		{"from_backend tag pattern", "auth:\n  from_backend:\n    tags: [\"a/b\"]\n", "config: auth.from_backend.tags[0]"},
		{"from_backend refuse without tags", "auth:\n  from_backend:\n    refuse_other_tags: true\n", "config: auth.from_backend.refuse_other_tags: needs tags"},
		{"from_backend without lookup user", "auth:\n  from_backend:\n    enabled: true\n", "config: auth.from_backend.lookup_user"},
		{"failure delays", "auth:\n  failure_delay: 2s\n  max_failure_delay: 1s\n", "config: auth.max_failure_delay"},
		{"a secret given twice", "backend:\n  password: x\n  password_env: HOME\n", "password_env: password is set too"},
		{"a secret from a missing file", "admin:\n  token_file: /nonexistent/holdfast-token\n", "token_file: open /nonexistent/holdfast-token"},
		{"fleet database empty", "fleet:\n  database: \"\"\n", "config: fleet.database: want a database name of 1 to 64 characters"},
		{"fleet database with a quote", "fleet:\n  database: \"hf`x\"\n", "config: fleet.database: \"hf`x\": only letters"},
		{"fleet password without user", "fleet:\n  password: x\n", "config: fleet.password: set without fleet.user"},
		{"_file on a field that is no secret", "backend:\n  user_file: /etc/hostname\n", "field user_file not found"},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.yaml))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestLoadEnvironment(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(path, []byte("backend:\n  address: 10.0.0.1:3306\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("HOLDFAST_BACKEND_ADDRESS", "127.0.0.1:3307")
	t.Setenv("HOLDFAST_BACKEND_PASSWORD", "")
	t.Setenv("HOLDFAST_FLEET_DATABASE", "hf_env")
	t.Setenv("HOLDFAST_FLEET_USER", "fleet_env")
	t.Setenv("HOLDFAST_FLEET_PASSWORD", "fleet_pw")
	c, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if c.Backend.Address != "127.0.0.1:3307" {
		t.Fatalf("address %q: environment should win", c.Backend.Address)
	}
	if c.Fleet.Database != "hf_env" || c.Fleet.User != "fleet_env" || c.Fleet.Password != "fleet_pw" {
		t.Fatalf("fleet %+v: the environment should set database, user and password", c.Fleet)
	}
	if _, err := Load(filepath.Join(t.TempDir(), "missing.yaml")); err == nil {
		t.Fatal("a missing file loaded")
	}
}

// Every password and token may come from a file or the environment, the
// engine's Redis password included; errors name the file or variable,
// never the secret.
func TestSecrets(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	t.Setenv("HF_TEST_LOOKUP", "look-secret")
	t.Setenv("HF_TEST_EMPTY", "")
	t.Setenv("HF_TEST_PROM", "prom-0123456789ab")
	yaml := "users:\n  - name: a\n    password_file: " + write("a", "pw-a\n") +
		"\n    backend_user: b\n    backend_password_file: " + write("b", "pw-b\r\n") +
		"\nbackend:\n  password_env: HF_TEST_LOOKUP\n" +
		"auth:\n  from_backend:\n    enabled: true\n    lookup_user: l\n    lookup_password_env: HF_TEST_LOOKUP\n" +
		"admin:\n  token_file: " + write("token", "tok\n") +
		"\n  credentials:\n    - name: oncall\n      scope: write\n      token_file: " + write("oncall", "oncall-0123456789\n") +
		"\n    - {name: prometheus, scope: read, token_env: HF_TEST_PROM}" +
		"\nreservation:\n  redis:\n    address: 127.0.0.1:6379\n    password_file: " + write("redis", "pw-redis") + "\n" +
		"fleet:\n  user: f\n  password_file: " + write("fleet", "pw-fleet\n") + "\n"
	c, err := Parse([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	got := []string{c.Users[0].Password, c.Users[0].BackendPassword, c.Backend.Password, c.Auth.FromBackend.LookupPassword, c.Admin.Token, c.Reservation.Redis.Password,
		c.Admin.Credentials[0].Token, c.Admin.Credentials[1].Token, c.Fleet.Password}
	want := []string{"pw-a", "pw-b", "look-secret", "look-secret", "tok", "pw-redis", "oncall-0123456789", "prom-0123456789ab", "pw-fleet"}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("secret %d: %q, want %q", i, got[i], want[i])
		}
	}
	for _, bad := range []struct{ yaml, want string }{
		{"backend:\n  password_file: " + write("empty", "\n") + "\n", "is empty"},
		{"backend:\n  password_env: HF_TEST_EMPTY\n", "environment variable HF_TEST_EMPTY is not set or empty"},
		{"backend:\n  password_env: HF_TEST_UNSET_VARIABLE\n", "HF_TEST_UNSET_VARIABLE is not set"},
	} {
		_, err := Parse([]byte(bad.yaml))
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%q: %v, want an error containing %q", bad.yaml, err, bad.want)
		}
	}
	// A secret file that cannot be read is named in the error. (That no
	// error shows a secret's content is the "is empty" case above: the
	// only error given after a file was read.)
	bad := write("dir-not-file", "x") + "/sub"
	_, err = Parse([]byte("users:\n  - name: a\n    password_file: " + bad + "\n"))
	if err == nil || !strings.Contains(err.Error(), bad) {
		t.Errorf("error %v, want one naming %s", err, bad)
	}
}

func mustRead(t *testing.T, path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
