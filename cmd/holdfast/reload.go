package main

import (
	"context"
	"crypto/sha256"
	"log/slog"
	"os"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/holdfast-db/holdfast/admin"
	"github.com/holdfast-db/holdfast/config"
	"github.com/holdfast-db/holdfast/internal/lifecycle"
	"github.com/holdfast-db/holdfast/proxy"
)

// reloader reads the configuration file again and applies it: one reload
// for SIGHUP, POST /api/reload and the file watch (reload_watch), one at
// a time. Its methods are safe for concurrent use.
type reloader struct {
	path  string        // the configuration file ("": built-in defaults)
	start config.Config // as started: what restart_required compares with
	srv   *proxy.Server
	log   *slog.Logger

	// reloading serializes reload, across its file reads and the
	// admin listener's rebinding; nothing else takes it.
	reloading sync.Mutex

	mu    sync.Mutex // guards following
	adm   *admin.Admin
	cur   config.Config // in force: the last applied
	local localToken    // the local admin credential's token in force
	sum   [sha256.Size]byte
}

// newReloader is the reloader of holdfast serve, started with cfg read
// from path.
func newReloader(path string, cfg config.Config, srv *proxy.Server, log *slog.Logger) *reloader {
	return &reloader{path: path, start: cfg, cur: cfg, srv: srv, log: log, sum: configSum(path)}
}

// setAdmin tells r the admin listener, and the local token it started
// with; before it (or with none), the admin section needs a restart.
func (r *reloader) setAdmin(adm *admin.Admin, local localToken) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.adm, r.local = adm, local
}

// current is the configuration in force (as the last reload left it).
func (r *reloader) current() config.Config {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cur
}

// restartOnly are the settings (and sections) read at start-up only, or
// kept by proxy.Server.Reload: a change to them applies at the next
// restart.
var restartOnly = []string{"listen", "tls", "backend", "routing", "fleet", "reservation", "max_procs", "log",
	"attribution", "server_version", "admin.pprof", "reload_watch"}

// reload reads the file and applies it as SIGHUP does: users, auth, pool
// limits, sessions, configured tag controls, shutdown settings and the
// admin listener's address, credentials and certificate, without
// dropping clients. A file that does not load changes nothing. by says
// who asked, for the log.
func (r *reloader) reload(_ context.Context, by string) admin.ReloadResult {
	r.reloading.Lock()
	defer r.reloading.Unlock()
	res := admin.ReloadResult{File: r.path}
	// The sum first: a change made while the file is read is seen again
	// by the watch.
	sum := configSum(r.path)
	next, err := config.Load(r.path)
	r.mu.Lock()
	r.sum = sum
	cur, adm, local := r.cur, r.adm, r.local
	r.mu.Unlock()
	if err != nil {
		r.log.Error("reload refused; keeping the running configuration", "by", by, "err", err)
		res.Error = err.Error()
		return res
	}
	res.Reloaded = true
	if err := r.srv.Reload(next); err != nil {
		res.Refused = append(res.Refused, err.Error())
	}
	applied := next
	if adm != nil {
		if local, err = reloadAdmin(adm, r.path, next.Admin, local, r.log); err != nil {
			res.Refused = append(res.Refused, "admin: "+err.Error())
			applied.Admin = cur.Admin
		}
	}
	for _, p := range settingsChanged(cur, applied) {
		if !restartNeeded(p, adm != nil) {
			res.Changed = append(res.Changed, p)
		}
	}
	for _, p := range settingsChanged(r.start, next) {
		if restartNeeded(p, adm != nil) {
			res.RestartRequired = append(res.RestartRequired, p)
		}
	}
	r.mu.Lock()
	r.cur, r.local = applied, local
	r.mu.Unlock()
	r.log.Info("configuration reloaded", "by", by, "file", r.path, "changed", res.Changed,
		"restart_required", res.RestartRequired, "refused", res.Refused)
	return res
}

// restartNeeded reports whether the setting at path applies only after a
// restart; the admin section does while no admin listener runs.
func restartNeeded(path string, adminRuns bool) bool {
	if !adminRuns && (path == "admin" || strings.HasPrefix(path, "admin.")) {
		return true
	}
	return slices.ContainsFunc(restartOnly, func(p string) bool { return path == p || strings.HasPrefix(path, p+".") })
}

// settingsChanged lists the settings whose values differ between a and
// b, as dotted YAML paths ("pool.max"); a list or map is one setting
// ("users"). Secrets are named, never shown.
func settingsChanged(a, b config.Config) []string {
	var out []string
	diffSettings("", reflect.ValueOf(a), reflect.ValueOf(b), &out)
	return out
}

var durationType = reflect.TypeFor[time.Duration]()

func diffSettings(path string, a, b reflect.Value, out *[]string) {
	if a.Kind() != reflect.Struct || a.Type() == durationType {
		if !reflect.DeepEqual(a.Interface(), b.Interface()) {
			*out = append(*out, path)
		}
		return
	}
	for i := range a.NumField() {
		f := a.Type().Field(i)
		if !f.IsExported() {
			continue
		}
		name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "-" {
			continue
		}
		p := path
		if opts != "inline" {
			if name == "" {
				name = strings.ToLower(f.Name)
			}
			if p != "" {
				p += "."
			}
			p += name
		}
		diffSettings(p, a.Field(i), b.Field(i), out)
	}
}

// configSum is a digest of what a reload would read: the configuration
// file and every file it names with a key ending in _file. A file that
// cannot be read counts by its error. The zero sum: no file.
func configSum(path string) [sha256.Size]byte {
	if path == "" {
		return [sha256.Size]byte{}
	}
	h := sha256.New()
	add := func(name string) []byte {
		b, err := os.ReadFile(name)
		h.Write([]byte(name + "\x00"))
		if err != nil {
			h.Write([]byte("error: " + err.Error()))
		} else {
			h.Write(b)
		}
		h.Write([]byte{0})
		return b
	}
	var root yaml.Node
	if err := yaml.Unmarshal(add(path), &root); err == nil {
		var names []string
		namedFiles(&root, &names)
		slices.Sort(names)
		for _, n := range slices.Compact(names) {
			add(n)
		}
	}
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return sum
}

// namedFiles appends the values of the keys ending in _file under n.
func namedFiles(n *yaml.Node, out *[]string) {
	for i, c := range n.Content {
		if n.Kind == yaml.MappingNode && i%2 == 1 {
			k := n.Content[i-1].Value
			if c.Kind == yaml.ScalarNode && strings.HasSuffix(k, "_file") && c.Value != "" {
				*out = append(*out, c.Value)
			}
		}
		namedFiles(c, out)
	}
}

// watch reads the configuration file and the files it names every
// interval, and reloads when what it reads differs from what the last
// reload read (see configSum), until ctx ends.
func (r *reloader) watch(ctx context.Context, every time.Duration) {
	for lifecycle.Sleep(ctx, every) == nil {
		sum := configSum(r.path)
		r.mu.Lock()
		same := sum == r.sum
		r.mu.Unlock()
		if !same {
			r.log.Info("the configuration file, or a file it names, changed: reloading", "file", r.path, "reload_watch", every)
			r.reload(ctx, "reload_watch")
		}
	}
}
