package holdfastproc

import (
	"fmt"
	"os"
	"strings"

	"gopkg.in/yaml.v3"
)

// The admin credential every configuration Render writes carries: a
// credential of scope write, so that the tests, benchmarks and chaos
// harness that run holdfast may change its controls. Their clients send
// AdminToken as a bearer token with every change (dbtest.Fetch does).
// Render turns the local credential (admin.local_token_path) off: the
// harness's processes may share a directory.
const (
	AdminCredential = "harness"
	AdminToken      = "holdfastproc-harness-0123456789abcdef"
)

// Config is a holdfast configuration file: the settings every caller
// gives (addresses, accounts, the backend) as fields, and the rest as
// YAML and settings applied over them. Whatever it leaves out is
// holdfast's default (config.yaml as shipped).
type Config struct {
	Listen string // listen: host:port for clients
	Users  []User // users
	// Admin is admin.listen (HTTP admin API and /metrics); "" disables the
	// admin listener. Its credentials are AdminCredential's alone, unless
	// YAML sets admin.credentials.
	Admin   string
	Backend Backend
	Fleet   Fleet
	// YAML is more configuration, merged over the fields above: a mapping
	// merges key by key into the mapping it meets, anything else replaces
	// what it meets. "" adds nothing.
	YAML string
	// Set are settings applied last, "path=value" as ParseSetting reads
	// them ("pool.max=8").
	Set []string
	// NoCredentials leaves admin.credentials and admin.local_token_path
	// out: for a holdfast of a version before them, whose configuration
	// parser rejects them (and whose admin API needs none on loopback).
	NoCredentials bool
}

// User is an item of users. A zero AuthPlugin or DefaultTag is left out
// (holdfast's default).
type User struct {
	Name, Password string
	AuthPlugin     string // auth_plugin
	DefaultTag     string // default_tag
}

// Backend is the backend section. A zero Instances or nil Replicas is left
// out (holdfast's default).
type Backend struct {
	Address        string // host:port of MariaDB
	User, Password string // the account holdfast's pool logs in as
	Database       string
	Instances      int      // instances: how many holdfast processes share the backend
	Replicas       []string // replicas' host:port
}

// Fleet is the fleet section's schema of holdfast's tables and holdfast's
// own account. A zero field is left out (holdfast's default).
type Fleet struct {
	Database       string // fleet.database
	User, Password string // fleet.user, fleet.password
}

// ParseSetting splits "pool.max=8" into its path, dotted as in
// config.yaml, and its value, read as YAML ("0", "30s", "true",
// "[{address: h:3306}]").
func ParseSetting(s string) (path []string, value any, err error) {
	k, v, ok := strings.Cut(s, "=")
	k = strings.TrimSpace(k)
	if !ok || k == "" {
		return nil, nil, fmt.Errorf("holdfastproc: setting %q: want path=value, e.g. pool.max=8", s)
	}
	if err := yaml.Unmarshal([]byte(v), &value); err != nil {
		return nil, nil, fmt.Errorf("holdfastproc: setting %q: %w", s, err)
	}
	return strings.Split(k, "."), value, nil
}

type mapping = map[string]any

// Render returns c as a configuration file. It fails when YAML is not a
// YAML mapping or a setting does not parse.
func (c Config) Render() ([]byte, error) {
	users := []mapping{}
	for _, u := range c.Users {
		e := mapping{"name": u.Name, "password": u.Password}
		if u.AuthPlugin != "" {
			e["auth_plugin"] = u.AuthPlugin
		}
		if u.DefaultTag != "" {
			e["default_tag"] = u.DefaultTag
		}
		users = append(users, e)
	}
	backend := mapping{"address": c.Backend.Address, "user": c.Backend.User, "password": c.Backend.Password,
		"database": c.Backend.Database}
	if c.Backend.Instances != 0 {
		backend["instances"] = c.Backend.Instances
	}
	if c.Backend.Replicas != nil {
		var rs []mapping
		for _, r := range c.Backend.Replicas {
			rs = append(rs, mapping{"address": r})
		}
		backend["replicas"] = rs
	}
	root := mapping{
		"listen":  c.Listen,
		"users":   users,
		"backend": backend,
		"admin": mapping{"listen": c.Admin, "local_token_path": "",
			"credentials": []mapping{{"name": AdminCredential, "scope": "write", "token": AdminToken}}},
	}
	if c.NoCredentials {
		root["admin"] = mapping{"listen": c.Admin}
	}
	fleet := mapping{}
	for k, v := range map[string]string{"database": c.Fleet.Database, "user": c.Fleet.User, "password": c.Fleet.Password} {
		if v != "" {
			fleet[k] = v
		}
	}
	if len(fleet) > 0 {
		root["fleet"] = fleet
	}
	if strings.TrimSpace(c.YAML) != "" {
		var more mapping
		if err := yaml.Unmarshal([]byte(c.YAML), &more); err != nil {
			return nil, fmt.Errorf("holdfastproc: YAML: %w", err)
		}
		merge(root, more)
	}
	for _, s := range c.Set {
		path, v, err := ParseSetting(s)
		if err != nil {
			return nil, err
		}
		at := root
		for _, k := range path[:len(path)-1] {
			next, ok := at[k].(mapping)
			if !ok {
				next = mapping{}
				at[k] = next
			}
			at = next
		}
		at[path[len(path)-1]] = v
	}
	b, err := yaml.Marshal(root)
	if err != nil {
		return nil, fmt.Errorf("holdfastproc: %w", err)
	}
	return b, nil
}

// merge sets what more holds into dst: mappings key by key, anything
// else replacing what it meets.
func merge(dst, more mapping) {
	for k, v := range more {
		if vm, ok := v.(mapping); ok {
			if dm, ok := dst[k].(mapping); ok {
				merge(dm, vm)
				continue
			}
		}
		dst[k] = v
	}
}

// Write renders c into the file at path (mode 0600: it holds passwords),
// after a first line of comment, header, when not "".
func (c Config) Write(path, header string) error {
	b, err := c.Render()
	if err != nil {
		return err
	}
	if header != "" {
		b = append([]byte("# "+header+"\n"), b...)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return fmt.Errorf("holdfastproc: %w", err)
	}
	return nil
}
