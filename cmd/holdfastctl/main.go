// Command holdfastctl is the on-call CLI for holdfast's admin API: which
// business flow ("tag") holds the database's connections, and drain or cap
// one flow during an incident, without a deploy. Run `holdfastctl help`.
// The commands live in internal/ctl; this file only parses the command line.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/holdfast-db/holdfast/internal/ctl"
)

const usage = `holdfastctl drives holdfast's admin API: see which flow ("tag") holds the
database's connections, and drain or cap one tag during an incident.

Usage:
  holdfastctl [global flags] COMMAND [flags] [args]

Commands:
  tags                   every tag since holdfast started: connections held now, hold
                         time, exec vs idle-in-transaction share, waits, counts, state
  holders                backend connections held right now, longest first
  top                    refreshing view: tags by connections held on average over the
                         last interval, the pool, the longest holders (Ctrl-C quits)
      -interval D        time between refreshes (default 2s)
      -n N               tag rows (default 20; 0 = all)
      -holders N         holder rows (default 10; 0 = none)
      -once              print one frame (after one interval) and exit
      -iterations N      print N frames and exit (default 0 = until Ctrl-C)
  drain TAG              new borrows for TAG fail fast on every holdfast instance (within
                         fleet.poll_interval); current holders may finish
      -grace D           then kill TAG's holders still holding after D (default: never)
      -reason TEXT       recorded with the drain and shown in its error, e.g. incident-123
  undrain TAG            lift the drain
  limit TAG N            cap TAG at N backend connections across the fleet; borrowers
                         over it queue (N = off or 0 lifts the cap)
      -reason TEXT       recorded with the limit and shown with it
  maxtxn TAG D           TAG's transactions holding a backend connection longer than D
                         are rolled back, their clients disconnected (D = off lifts it)
  class TAG CLASS        put TAG (or the tags matching a pattern such as report_*) in an
                         overload class: critical, normal, background (off lifts it)
      -reason TEXT       recorded with the class
  route TAG POLICY       where TAG's reads (or those of the tags matching a pattern) go:
                         primary, replica (reads its own writes), replica_stale_ok
                         (within routing.max_replica_lag only); off lifts it
      -reason TEXT       recorded with the route
  shapes                 statement shapes held now (most held first) and the controls on
                         shapes: a shape is 16 hex digits, the same for every statement
                         that differs only in its literals, comments and spacing
  shape block SHAPE      statements of SHAPE get error 9007 on every instance (running
                         ones finish); KILL, COMMIT and ROLLBACK always pass
  shape unblock SHAPE    lift the block
  shape limit SHAPE N    at most N statements of SHAPE run at once across the fleet; the
                         others wait, then get error 9008 (N = off or 0 lifts the cap)
      -reason TEXT       recorded with the control and shown in its error
  readonly TAG           TAG's statements (or those of the tags matching a pattern) that may
                         write get error 9011 on every instance: all but reads, SHOW, SET,
                         USE, BEGIN, COMMIT and ROLLBACK (readonly TAG off lifts it)
      -reason TEXT       recorded with the control and shown in its error
  pause TAG              for a planned switchover: TAG's statements (or those of the tags
                         matching a pattern; * for all) that need a new backend connection
                         wait, holding none, on every instance; open transactions and
                         pinned sessions go on; past failover.hold they get error 9010
  resume TAG             lift the pause (the same as pause TAG off): held statements run
      -reason TEXT       recorded with the control
    drain, undrain, limit, maxtxn, class, route, shape, readonly and pause also take:
      -for D             lift the control by itself after D (e.g. 30m), everywhere (not with -local)
      -local             act on the instance asked only, not the fleet
      -by NAME           recorded as who set it (default: $HOLDFAST_CTL_BY, else $USER@host)
  topology               which server is the primary, each server's role (replica,
                         read-only, split brain, unreachable), the switchovers seen,
                         statements held, retried and refused with 9010, the hold's
                         settings (failover.hold, failover.max_held) and any pause
  controls               the fleet's controls in force: who set them, when, why, until when
  explain SQL            the plan SQL would get now on the instance asked: refused or not,
                         answered by holdfast or run, on the primary, a pipe or a replica,
                         its class, the name the controls know it by, the controls it
                         meets, the pin it would cause
      -user U            as the first statement of a session of user U
      -tag T             carrying tag T (default: the tag in SQL's comment, else U's)
  fleet                  the live holdfast instances on the database, their versions and
                         pool sizes
  status                 the instance's version, whether it is ready (and what it waits
                         for), its fleet and pool
  reload                 make the instance read its configuration file again and apply
                         it, as SIGHUP does: prints what changed and what waits for a
                         restart (needs a write credential)
  authority              show the Redis-migration kill switch in force (docs/migration.md)
  authority redis|holdfast
                         switch who decides reserves, for every holdfast on the database
                         (each reads the switch within its poll interval)
      -shops IDS         with redis: these shops (comma-separated) are on holdfast
      -percent N         with redis: shops whose CRC32(shop_id) % 100 < N are on holdfast
      -reason TEXT       recorded with the switch, e.g. incident-123
      -force             switch to redis although its counters are stale
      -by NAME           as for drain
  help                   this text

Global flags (before or after the command):
  -addr ADDR             holdfast's admin.listen, HOST:PORT or http(s)://HOST:PORT
                         (default $HOLDFAST_ADMIN_ADDR, else 127.0.0.1:6034)
  -token-file FILE       a file holding the token of one of holdfast's admin.credentials
                         (default $HOLDFAST_ADMIN_TOKEN_FILE); changes need scope write
  -token TOKEN           the token itself (default $HOLDFAST_ADMIN_TOKEN; prefer a
                         file: flags show up in ps)
                         With neither, on holdfast's own machine holdfastctl reads the
                         local token holdfast writes (admin.local_token_path) when a
                         command needs one and the file is readable.
  -ca-file FILE          the PEM CA of holdfast's admin.tls certificate, for https://
                         (default $HOLDFAST_ADMIN_CA_FILE; else the system's)
  -timeout D             limit on each request (default 5s)

A change is recorded as made by the credential's name; with -by, as NAME/BY, BY
being your word (shown as unverified).

A TAG is 1-64 characters of [A-Za-z0-9_.:-]; one starting with '-' goes after --.
Exit status: 0 done, 1 the admin API failed or could not be reached, 2 usage error.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// globals are the flags every command takes.
type globals struct {
	addr, token, tokenFile, caFile string
	timeout                        time.Duration
}

func (g *globals) flagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // run prints errors and usage itself
	fs.StringVar(&g.addr, "addr", g.addr, "holdfast's admin.listen")
	fs.StringVar(&g.token, "token", g.token, "a credential's token")
	fs.StringVar(&g.tokenFile, "token-file", g.tokenFile, "a file holding a credential's token")
	fs.StringVar(&g.caFile, "ca-file", g.caFile, "the PEM CA of holdfast's admin.tls certificate")
	fs.DurationVar(&g.timeout, "timeout", g.timeout, "limit on each request")
	return fs
}

// credential is the token the command line or the environment gives, and
// where it came from: a flag wins over the environment, and one source
// may give only one of a token and a token file.
func (g *globals) credential(getenv func(string) string, flagToken, flagFile bool) (token, from string, err error) {
	switch {
	case flagToken && flagFile:
		return "", "", &ctl.UsageError{Msg: "give -token or -token-file, not both"}
	case flagFile:
		return readToken(g.tokenFile, "-token-file "+g.tokenFile)
	case flagToken:
		return g.token, "-token", nil
	}
	envToken, envFile := getenv("HOLDFAST_ADMIN_TOKEN"), getenv("HOLDFAST_ADMIN_TOKEN_FILE")
	switch {
	case envToken != "" && envFile != "":
		return "", "", &ctl.UsageError{Msg: "HOLDFAST_ADMIN_TOKEN and HOLDFAST_ADMIN_TOKEN_FILE are both set: set one"}
	case envFile != "":
		return readToken(envFile, "$HOLDFAST_ADMIN_TOKEN_FILE ("+envFile+")")
	case envToken != "":
		return envToken, "$HOLDFAST_ADMIN_TOKEN", nil
	}
	return "", "", nil
}

func readToken(path, from string) (string, string, error) {
	tok, err := ctl.ReadTokenFile(path)
	if err != nil {
		return "", "", &ctl.UsageError{Msg: fmt.Sprintf("cannot read the token of %s: %v", from, err)}
	}
	return tok, from, nil
}

// run is holdfastctl with its environment passed in; it returns the exit code.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	g := globals{addr: getenv("HOLDFAST_ADMIN_ADDR"), caFile: getenv("HOLDFAST_ADMIN_CA_FILE"), timeout: 5 * time.Second}
	if g.addr == "" {
		g.addr = ctl.DefaultAddr
	}
	fs := g.flagSet("holdfastctl")
	if err := fs.Parse(args); err != nil {
		return done(flagErr(err), stdout, stderr)
	}
	if fs.NArg() == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	global := fs // the flags before the command
	cmd, args := fs.Arg(0), fs.Args()[1:]
	fs = g.flagSet("holdfastctl " + cmd)
	top := ctl.TopOptions{}
	var once bool
	var grace time.Duration
	var reason string
	var shops string
	var percent int
	var force bool
	var scope ctl.Scope
	var explainUser, explainTag string
	var control *ctl.TagControl // a kind set through the routes for every kind
	var want []string           // the positional arguments
	scoped := func() {
		fs.DurationVar(&scope.For, "for", 0, "")
		fs.BoolVar(&scope.Local, "local", false, "")
		fs.StringVar(&scope.By, "by", defaultBy(getenv), "")
	}
	switch cmd {
	case "help":
		fmt.Fprint(stdout, usage)
		return 0
	case "tags", "holders":
	case "top":
		fs.DurationVar(&top.Interval, "interval", 2*time.Second, "")
		fs.IntVar(&top.Tags, "n", 20, "")
		fs.IntVar(&top.Holders, "holders", 10, "")
		fs.IntVar(&top.Iterations, "iterations", 0, "")
		fs.BoolVar(&once, "once", false, "")
	case "drain":
		fs.DurationVar(&grace, "grace", 0, "")
		fs.StringVar(&reason, "reason", "", "")
		scoped()
		want = []string{"TAG"}
	case "undrain":
		scoped()
		want = []string{"TAG"}
	case "limit":
		fs.StringVar(&reason, "reason", "", "")
		scoped()
		want = []string{"TAG", "N"}
	case "maxtxn":
		scoped()
		want = []string{"TAG", "D"}
	case "class":
		fs.StringVar(&reason, "reason", "", "")
		scoped()
		want = []string{"TAG", "CLASS"}
	case "route":
		fs.StringVar(&reason, "reason", "", "")
		scoped()
		want = []string{"TAG", "POLICY"}
	case "shapes":
	case "shape":
		fs.StringVar(&reason, "reason", "", "")
		scoped()
		want = []string{"block|unblock|limit", "SHAPE"}
		if len(args) > 0 && args[0] == "limit" {
			want = append(want, "N")
		}
	case "controls", "fleet", "status", "reload", "topology":
	case "explain":
		fs.StringVar(&explainUser, "user", "", "")
		fs.StringVar(&explainTag, "tag", "", "")
		want = []string{"SQL"}
	case "authority":
		fs.StringVar(&reason, "reason", "", "")
		fs.StringVar(&shops, "shops", "", "")
		fs.IntVar(&percent, "percent", 0, "")
		fs.BoolVar(&force, "force", false, "")
		fs.StringVar(&scope.By, "by", defaultBy(getenv), "")
		want = []string{"[redis|holdfast]"}
	default:
		tc, ok := ctl.TagControlNamed(cmd)
		if !ok {
			return done(&ctl.UsageError{Msg: fmt.Sprintf("unknown command %q", cmd)}, stdout, stderr)
		}
		control = &tc
		fs.StringVar(&reason, "reason", "", "")
		scoped()
	}
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return done(flagErr(err), stdout, stderr)
	}
	if cmd == "authority" && len(pos) <= 1 {
		want = pos // none: show; one: redis or holdfast
	}
	if control != nil {
		want = control.Args(pos)
	}
	if len(pos) != len(want) {
		return done(&ctl.UsageError{Msg: strings.TrimSpace("usage: holdfastctl " + cmd + " " + strings.Join(want, " "))}, stdout, stderr)
	}
	set := map[string]bool{}
	for _, f := range []*flag.FlagSet{global, fs} {
		f.Visit(func(f *flag.Flag) { set[f.Name] = true })
	}
	token, from, err := g.credential(getenv, set["token"], set["token-file"])
	if err != nil {
		return done(err, stdout, stderr)
	}
	client, err := ctl.NewClient(g.addr, token, g.timeout)
	if err != nil {
		return done(err, stdout, stderr)
	}
	client.TokenFrom = from
	if g.caFile != "" {
		if err := client.TrustCA(g.caFile); err != nil {
			return done(err, stdout, stderr)
		}
	}
	if scope.For < 0 {
		return done(&ctl.UsageError{Msg: "-for must be a positive duration such as 30m"}, stdout, stderr)
	}
	client.Scope = scope
	c := &ctl.CLI{Client: client, Out: stdout}
	if f, ok := stdout.(*os.File); ok {
		c.Width, c.Terminal = ctl.TerminalWidth(f)
	}
	if once {
		top.Iterations = 1
	}
	switch cmd {
	case "tags":
		err = c.Tags(ctx)
	case "holders":
		err = c.Holders(ctx)
	case "top":
		err = c.Top(ctx, top)
	case "drain":
		err = c.Drain(ctx, pos[0], grace, reason)
	case "undrain":
		err = c.Undrain(ctx, pos[0])
	case "limit":
		err = c.Limit(ctx, pos[0], pos[1], reason)
	case "maxtxn":
		err = c.MaxTxn(ctx, pos[0], pos[1])
	case "class":
		err = c.Class(ctx, pos[0], pos[1], reason)
	case "route":
		err = c.Route(ctx, pos[0], pos[1], reason)
	case "shapes":
		err = c.Shapes(ctx)
	case "shape":
		max := ""
		if len(pos) > 2 {
			max = pos[2]
		}
		err = c.Shape(ctx, pos[0], pos[1], max, reason)
	case "controls":
		err = c.Controls(ctx)
	case "fleet":
		err = c.Fleet(ctx)
	case "status":
		err = c.Status(ctx)
	case "reload":
		err = c.Reload(ctx)
	case "topology":
		err = c.Topology(ctx)
	case "explain":
		err = c.Explain(ctx, explainUser, explainTag, pos[0])
	case "authority":
		if len(pos) == 0 {
			err = c.ShowAuthority(ctx)
			break
		}
		var ch ctl.AuthorityChange
		if ch, err = ctl.ParseAuthority(pos[0], shops, percent); err == nil {
			ch.Reason, ch.Force = reason, force
			err = c.SetAuthority(ctx, ch)
		}
	default: // a kind set through the routes for every kind
		value := ""
		if len(pos) > 1 {
			value = pos[1]
		}
		err = c.Control(ctx, *control, pos[0], value, reason)
	}
	return done(err, stdout, stderr)
}

// defaultBy names who runs holdfastctl: $HOLDFAST_CTL_BY, else $USER@host.
func defaultBy(getenv func(string) string) string {
	if by := getenv("HOLDFAST_CTL_BY"); by != "" {
		return by
	}
	user := getenv("USER")
	if user == "" {
		user = "holdfastctl"
	}
	host, _ := os.Hostname()
	return user + "@" + host
}

// parseInterleaved parses fs from args, allowing flags after positional
// arguments (drain TAG -grace 30s); everything after "--" is positional.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			return append(pos, rest...), nil
		}
		if len(rest) == 0 {
			return pos, nil
		}
		pos, args = append(pos, rest[0]), rest[1:]
	}
}

// flagErr makes a flag parse error a usage error; -h stays flag.ErrHelp.
func flagErr(err error) error {
	if errors.Is(err, flag.ErrHelp) {
		return err
	}
	return &ctl.UsageError{Msg: err.Error()}
}

// done prints err and maps it to the exit code: 0, 1, or 2 for usage.
func done(err error, stdout, stderr io.Writer) int {
	var ue *ctl.UsageError
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprint(stdout, usage)
		return 0
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "holdfastctl: %v\nRun 'holdfastctl help' for usage.\n", err)
		return 2
	}
	fmt.Fprintf(stderr, "holdfastctl: %v\n", err)
	return 1
}
