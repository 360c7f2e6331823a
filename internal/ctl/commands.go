package ctl

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"
)

// maxTagLen is attribution.MaxTagLen, restated (see the package doc).
const maxTagLen = 64

// CLI runs the on-call commands against one admin API and prints to Out.
// Set Client and Out; the other fields have usable zero values. Its methods
// are meant to be called one at a time, from the goroutine that owns Out.
type CLI struct {
	Client *Client
	Out    io.Writer
	// Width is the terminal's width in columns; 0 means Out is not a
	// terminal: statements are cut to 60 characters instead of to the width.
	Width int
	// Terminal makes top redraw one screen in place (ANSI clear) instead of
	// printing frame after frame.
	Terminal bool
	// Now and Sleep are the clock top measures intervals with; nil means
	// time.Now and a timer. Sleep returns early with ctx.Err().
	Now   func() time.Time
	Sleep func(ctx context.Context, d time.Duration) error
}

// Tags prints every tag's totals since holdfast started, most hold time
// first.
func (c *CLI) Tags(ctx context.Context) error {
	l, err := c.Client.Tags(ctx)
	if err != nil {
		return err
	}
	return writeTags(c.Out, l)
}

func writeTags(w io.Writer, l TagList) error {
	tags := slices.Clone(l.Tags)
	slices.SortStableFunc(tags, func(a, b Tag) int { return cmp.Compare(b.HoldSeconds, a.HoldSeconds) })
	t := table{cols: []column{
		{name: "TAG"}, {name: "HELD NOW", right: true}, {name: "HOLD s", right: true},
		{name: "EXEC %", right: true}, {name: "IDLE-IN-TXN %", right: true}, {name: "WAIT s", right: true},
		{name: "BORROWS", right: true}, {name: "STMTS", right: true}, {name: "TXNS", right: true},
		{name: "ERRORS", right: true}, {name: "SLOW", right: true}, {name: "STATE"},
	}}
	for _, g := range tags {
		t.add(clean(g.Tag), strconv.Itoa(g.HeldNow), fmtSeconds(g.HoldSeconds),
			fmtPct(g.ExecSeconds, g.HoldSeconds), fmtPct(g.IdleInTransactionSeconds, g.HoldSeconds),
			fmtSeconds(g.WaitSeconds), itoa(g.Borrows), itoa(g.Statements), itoa(g.Transactions),
			itoa(g.Errors), itoa(g.SlowTransactions), state(g.Drained, g.Limit))
	}
	var b strings.Builder
	if len(tags) == 0 {
		b.WriteString("no tags yet: holdfast has lent no backend connection since it started\n")
	} else {
		if err := t.write(&b, 0); err != nil {
			return err
		}
		b.WriteString("totals since holdfast started; EXEC % and IDLE-IN-TXN % are shares of HOLD s\n")
	}
	if l.Folded > 0 {
		fmt.Fprintf(&b, "%d new tag names were counted under \"other\": holdfast's tag bound was reached\n", l.Folded)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// Holders prints the backend connections held right now, longest first.
func (c *CLI) Holders(ctx context.Context) error {
	hs, err := c.Client.Holders(ctx)
	if err != nil {
		return err
	}
	var b strings.Builder
	if err := writeHolders(&b, hs, 0, c.Width); err != nil {
		return err
	}
	_, err = io.WriteString(c.Out, b.String())
	return err
}

// writeHolders prints the n longest holders (all when n is 0) with a
// summary line. width is as CLI.Width.
func writeHolders(w io.Writer, hs []Holder, n, width int) error {
	hs = slices.Clone(hs)
	slices.SortStableFunc(hs, func(a, b Holder) int { return cmp.Compare(b.HeldForSeconds, a.HeldForSeconds) })
	inTxn := 0
	for _, h := range hs {
		if h.InTransaction {
			inTxn++
		}
	}
	if len(hs) == 0 {
		_, err := io.WriteString(w, "no backend connection is held right now\n")
		return err
	}
	shown := hs
	if n > 0 && len(shown) > n {
		shown = shown[:n]
	}
	t := table{cols: []column{
		{name: "CLIENT", right: true}, {name: "USER"}, {name: "TAG"}, {name: "HELD FOR", right: true},
		{name: "IN TXN"}, {name: "STATEMENT"},
	}}
	for _, h := range shown {
		client := "-" // holdfast's own work
		if h.ClientID != 0 {
			client = strconv.FormatUint(h.ClientID, 10)
		}
		txn := "no"
		if h.InTransaction {
			txn = "yes"
		}
		stmt := clean(h.Statement)
		if width <= 0 {
			stmt = truncate(stmt, 60)
		}
		t.add(client, orDash(clean(h.User)), clean(h.Tag), fmtHeld(h.HeldForSeconds), txn, orDash(stmt))
	}
	if err := t.write(w, width); err != nil {
		return err
	}
	more := ""
	if len(shown) < len(hs) {
		more = fmt.Sprintf(" (%d not shown)", len(hs)-len(shown))
	}
	_, err := fmt.Fprintf(w, "%s held, %d in a transaction%s\n", plural(len(hs), "backend connection"), inTxn, more)
	return err
}

// Drain makes new borrows for tag fail fast; with grace > 0 holdfast kills
// the tag's holders once it has passed. It prints one line.
func (c *CLI) Drain(ctx context.Context, tag string, grace time.Duration, reason string) error {
	if err := CheckTag(tag); err != nil {
		return err
	}
	if grace < 0 {
		return usagef("drain: -grace %v is negative", grace)
	}
	s, err := c.Client.Drain(ctx, tag, grace, reason)
	if err != nil {
		return err
	}
	name := answeredTag(s.Tag, tag)
	if !s.Drained {
		return c.unexpected("drain", name, "drained=false")
	}
	holders := "current holders may finish"
	if grace > 0 {
		holders = fmt.Sprintf("holders still holding after %v are killed", grace)
	}
	why := ""
	if reason != "" {
		why = " (" + clean(reason) + ")"
	}
	_, err = fmt.Fprintf(c.Out, "drained %s%s: its new borrows fail fast, %s%s (undo: holdfastctl undrain %s)\n", name, why, holders, c.where(s.Scope, s.Author), name)
	return err
}

// where says where a control change went, and who holdfast recorded as
// its author, for the line a command prints.
func (c *CLI) where(scope string, by Author) string {
	s := ""
	switch {
	case scope == "fleet" && c.Client.Scope.For > 0:
		s = fmt.Sprintf("; on every holdfast instance, for %v", c.Client.Scope.For)
	case scope == "fleet":
		s = "; on every holdfast instance"
	case scope != "":
		s = "; " + scope
	}
	if by.SetBy != "" {
		s += "; set by " + by.String()
	}
	return s
}

// Undrain lifts a drain. It prints one line.
func (c *CLI) Undrain(ctx context.Context, tag string) error {
	if err := CheckTag(tag); err != nil {
		return err
	}
	s, err := c.Client.Undrain(ctx, tag)
	if err != nil {
		return err
	}
	name := answeredTag(s.Tag, tag)
	if s.Drained {
		return c.unexpected("undrain", name, "drained=true")
	}
	_, err = fmt.Fprintf(c.Out, "undrained %s: its new borrows proceed%s\n", name, c.where(s.Scope, s.Author))
	return err
}

// Limit caps tag at max concurrent backend connections; max is a positive
// number, or "off" or "0" to lift the cap (see ParseLimit). reason, when not
// empty, is recorded with the limit. It prints one line.
func (c *CLI) Limit(ctx context.Context, tag, max, reason string) error {
	if err := CheckTag(tag); err != nil {
		return err
	}
	n, err := ParseLimit(max)
	if err != nil {
		return err
	}
	s, err := c.Client.SetLimit(ctx, tag, n, reason)
	if err != nil {
		return err
	}
	name := answeredTag(s.Tag, tag)
	if s.Limit != n {
		return c.unexpected("limit", name, fmt.Sprintf("limit=%d", s.Limit))
	}
	if n == 0 {
		_, err = fmt.Fprintf(c.Out, "lifted the limit on %s: it may hold any number of backend connections%s\n", name, c.where(s.Scope, s.Author))
		return err
	}
	here := ""
	if s.Scope == "fleet" && s.InForceHere != nil {
		here = fmt.Sprintf(" (this instance's share now: %d)", *s.InForceHere)
	}
	_, err = fmt.Fprintf(c.Out, "limited %s to %d backend connections: borrowers over the cap queue%s%s (lift: holdfastctl limit %s off)\n", name, n, c.where(s.Scope, s.Author), here, name)
	return err
}

// MaxTxn bounds how long a transaction of tag may hold its backend
// connection; d is a duration such as 2s, or "off" or "0" to lift the
// tag's own bound. It prints one line.
func (c *CLI) MaxTxn(ctx context.Context, tag, d string) error {
	if err := CheckTag(tag); err != nil {
		return err
	}
	var dur time.Duration
	if !strings.EqualFold(d, "off") && d != "0" {
		var err error
		if dur, err = time.ParseDuration(d); err != nil || dur <= 0 {
			return usagef("maxtxn: D must be a duration such as 2s, or off to lift the bound; got %q", d)
		}
	}
	s, err := c.Client.SetMaxTransactionTime(ctx, tag, dur)
	if err != nil {
		return err
	}
	name := answeredTag(s.Tag, tag)
	if dur == 0 {
		_, err = fmt.Fprintf(c.Out, "lifted %s's own max_transaction_time (sessions.max_transaction_time, if set, applies)%s\n", name, c.where(s.Scope, s.Author))
		return err
	}
	_, err = fmt.Fprintf(c.Out, "transactions of %s that hold a backend connection longer than %v are rolled back and their clients disconnected%s (lift: holdfastctl maxtxn %s off)\n", name, dur, c.where(s.Scope, s.Author), name)
	return err
}

// classNames are the overload classes by their fleet control value.
var classNames = []string{"critical", "normal", "background"}

// Class puts the tags matching pattern (a tag, * for any run of
// characters) in an overload class: critical, normal, background, or off
// to lift it. It prints one line.
func (c *CLI) Class(ctx context.Context, pattern, class, reason string) error {
	if err := CheckTag(strings.ReplaceAll(pattern, "*", "x")); err != nil {
		return err
	}
	if strings.EqualFold(class, "off") {
		class = ""
	} else if !slices.Contains(classNames, class) {
		return usagef("class: CLASS must be critical, normal, background or off; got %q", class)
	}
	s, err := c.Client.SetClass(ctx, pattern, class, reason)
	if err != nil {
		return err
	}
	if class == "" {
		_, err = fmt.Fprintf(c.Out, "lifted the class of %s%s (overload.classes applies; here now: %s)\n", pattern, c.where(s.Scope, s.Author), s.ClassHereNow)
		return err
	}
	if s.ClassHereNow != class && !strings.HasPrefix(s.Scope, "fleet") {
		// A local class loses to the fleet's: say so rather than "done".
		return c.unexpected("class", pattern, "class "+clean(s.ClassHereNow)+" in force there (a fleet class wins over a local one)")
	}
	_, err = fmt.Fprintf(c.Out, "%s is %s%s (lift: holdfastctl class %s off)\n", pattern, class, c.where(s.Scope, s.Author), pattern)
	return err
}

// Route gives the tags matching pattern a routing policy for reads on
// replicas: primary, replica, replica_stale_ok, or off to lift it.
func (c *CLI) Route(ctx context.Context, pattern, policy, reason string) error {
	if err := CheckTag(strings.ReplaceAll(pattern, "*", "x")); err != nil {
		return err
	}
	if strings.EqualFold(policy, "off") {
		policy = ""
	} else if !slices.Contains([]string{"primary", "replica", "replica_stale_ok"}, policy) {
		return usagef("route: POLICY must be primary, replica, replica_stale_ok or off; got %q", policy)
	}
	s, err := c.Client.SetRoute(ctx, pattern, policy, reason)
	if err != nil {
		return err
	}
	if policy == "" {
		_, err = fmt.Fprintf(c.Out, "lifted the route of %s%s (routing.tags applies; here now: %s)\n", pattern, c.where(s.Scope, s.Author), s.RouteHereNow)
		return err
	}
	if s.RouteHereNow != policy && !strings.HasPrefix(s.Scope, "fleet") {
		// A local route loses to the fleet's: say so rather than "done".
		return c.unexpected("route", pattern, "route "+clean(s.RouteHereNow)+" in force there (a fleet route wins over a local one)")
	}
	_, err = fmt.Fprintf(c.Out, "%s reads: %s%s (here now: %s; lift: holdfastctl route %s off)\n", pattern, policy, c.where(s.Scope, s.Author), s.RouteHereNow, pattern)
	return err
}

// IgnoredControl is a row of holdfast_controls the instance does not
// apply (invalid, or of a kind it does not know), and why (GET
// /api/controls).
type IgnoredControl struct {
	FleetControl
	Reason string `json:"ignored_because"`
}

// CapShares is a fleet-wide cap's split among the instances, as the
// instance asked read it at its last renewal (GET /api/controls).
type CapShares struct {
	Tag     string     `json:"tag"`
	Cap     int        `json:"cap"`
	Granted int        `json:"granted"` // the instance's grant
	Share   int        `json:"share"`   // its fair share now
	Admits  int        `json:"admits"`  // what it admits now
	Grants  []CapGrant `json:"grants"`
	Renewed time.Time  `json:"renewed"`
}

// CapGrant is one instance's row of a fleet-wide cap: its grant, its
// demand (held plus queued under the cap) and its fair share.
type CapGrant struct {
	Instance string `json:"instance_id"`
	Granted  int    `json:"granted"`
	Wanted   int    `json:"wanted"`
	Share    int    `json:"share"`
}

// Controls prints the fleet's controls in force: tag, kind, value, who set
// them, when, until when and why; the rows the instance ignores, and why;
// how each fleet-wide cap is split among the instances; then whether this
// instance's view is current.
func (c *CLI) Controls(ctx context.Context) error {
	cs, err := c.Client.Controls(ctx)
	if err != nil {
		return err
	}
	return writeControls(c.Out, cs)
}

func writeControls(w io.Writer, cs Controls) error {
	if !cs.Fleet {
		_, err := fmt.Fprintln(w, "this holdfast shares no controls with a fleet (fleet.disabled); holdfastctl tags shows its own")
		return err
	}
	if len(cs.Controls) == 0 {
		fmt.Fprintln(w, "no fleet controls in force")
	} else {
		fmt.Fprintf(w, "%-24s %-8s %-8s %-20s %-20s %-20s %s\n", "TAG", "KIND", "VALUE", "SET BY", "SET AT (UTC)", "EXPIRES (UTC)", "REASON")
		for _, fc := range cs.Controls {
			fmt.Fprintf(w, "%-24s %-8s %-8s %-20s %-20s %-20s %s\n", clean(fc.Tag), clean(fc.Kind), controlValue(fc), clean(SetByText(fc.SetBy)),
				fc.SetAt.UTC().Format("2006-01-02 15:04:05"), expiry(fc.Expires), clean(fc.Reason))
		}
	}
	writeNotEverywhere(w, cs.NotEverywhere)
	if len(cs.Ignored) > 0 {
		fmt.Fprintf(w, "\nIGNORED: %d row(s) of holdfast_controls are not in force on this instance (fix or delete them):\n", len(cs.Ignored))
		fmt.Fprintf(w, "%-24s %-8s %-8s %-20s %-20s %s\n", "TAG", "KIND", "VALUE", "SET BY", "SET AT (UTC)", "WHY")
		for _, ig := range cs.Ignored {
			fmt.Fprintf(w, "%-24s %-8s %-8d %-20s %-20s %s\n", clean(ig.Tag), clean(ig.Kind), ig.Value, clean(ig.SetBy),
				ig.SetAt.UTC().Format("2006-01-02 15:04:05"), clean(ig.Reason))
		}
	}
	if cs.Truncated {
		fmt.Fprintln(w, "TRUNCATED: holdfast_controls holds more rows than an instance reads (10000); the rest are not in force")
	}
	if len(cs.Caps) > 0 {
		fmt.Fprintln(w, "\nFLEET-WIDE CAPS, split by demand (held + queued under the cap), as this instance last renewed its grant:")
		fmt.Fprintf(w, "%-24s %5s  %-40s %7s %7s %7s\n", "TAG", "CAP", "INSTANCE", "GRANT", "SHARE", "DEMAND")
		for _, cp := range cs.Caps {
			tag, capN := clean(cp.Tag), strconv.Itoa(cp.Cap)
			if len(cp.Grants) == 0 {
				fmt.Fprintf(w, "%-24s %5s  %-40s\n", tag, capN, "(not renewed yet)")
			}
			for _, g := range cp.Grants {
				id := clean(g.Instance)
				if g.Instance == cs.Instance {
					id += " (this)"
				}
				fmt.Fprintf(w, "%-24s %5s  %-40s %7d %7d %7d\n", tag, capN, id, g.Granted, g.Share, g.Wanted)
				tag, capN = "", ""
			}
		}
	}
	if len(cs.Here) > 0 {
		fmt.Fprintln(w, "\nIN FORCE ON THIS INSTANCE, from every source (config.yaml, local, the fleet):")
		fmt.Fprintf(w, "%-24s %-9s %-36s %-7s %-20s %s\n", "TAG", "KIND", "CONTROL", "FROM", "SET BY", "REASON")
		for _, h := range cs.Here {
			fmt.Fprintf(w, "%-24s %-9s %-36s %-7s %-20s %s\n", clean(h.Tag), clean(h.Kind), clean(h.Shown), clean(h.Source),
				orDash(clean(SetByText(h.SetBy))), orDash(clean(h.Reason)))
		}
	}
	return readState(w, cs.NoSchema, cs.Stale, cs.Known, cs.LastRead, cs.Error)
}

// writeNotEverywhere warns of the controls in force on part of the fleet
// only: some live instances (of another version) do not know their kind.
func writeNotEverywhere(w io.Writer, us []Unapplied) {
	if len(us) == 0 {
		return
	}
	fmt.Fprintf(w, "\nWARNING: %d control(s) in force on only part of the fleet: some live instances (of another version) cannot apply their kind (holdfastctl fleet shows the versions):\n", len(us))
	fmt.Fprintf(w, "%-24s %-8s %s\n", "TAG", "KIND", "NOT APPLIED BY")
	for _, u := range us {
		ids := make([]string, len(u.NotBy))
		for i, id := range u.NotBy {
			ids[i] = clean(id)
		}
		fmt.Fprintf(w, "%-24s %-8s %s (%d of %d live instances)\n", clean(u.Tag), clean(u.Kind), strings.Join(ids, ", "), len(u.NotBy), u.Live)
	}
}

// controlValue is how a control's value reads, by its kind.
func controlValue(fc FleetControl) string {
	switch fc.Kind {
	case "drain":
		return "grace " + (time.Duration(fc.Value) * time.Millisecond).String()
	case "max_txn":
		return (time.Duration(fc.Value) * time.Millisecond).String()
	case "class":
		if fc.Value >= 0 && fc.Value < int64(len(classNames)) {
			return classNames[fc.Value]
		}
	case "limit", "route":
	default:
		if fc.Shown != "" {
			return clean(fc.Shown) // a kind holdfastctl has no word of its own for
		}
	}
	return strconv.FormatInt(fc.Value, 10)
}

func expiry(t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return t.UTC().Format("2006-01-02 15:04:05")
}

// readState prints, when it is not current, how fresh the instance's view
// of the fleet's tables is.
func readState(w io.Writer, noSchema, stale, known bool, lastRead time.Time, errText string) (err error) {
	switch {
	case noSchema:
		_, err = fmt.Fprintln(w, "the fleet's tables are missing (run holdfast migrate): controls apply to the instance they are set on")
	case stale:
		_, err = fmt.Fprintf(w, "STALE: this instance could not read the fleet's tables since %s (%s); it keeps the last controls and members it read\n",
			lastRead.UTC().Format("15:04:05"), clean(errText))
	case !known:
		_, err = fmt.Fprintln(w, "this instance has not read the fleet's tables yet")
	}
	return err
}

// Fleet prints the live holdfast instances: version, schema range, pool
// size, duties, and which controls in force each cannot apply.
func (c *CLI) Fleet(ctx context.Context) error {
	fs, err := c.Client.Fleet(ctx)
	if err != nil {
		return err
	}
	w := c.Out
	if !fs.Fleet {
		_, err = fmt.Fprintln(w, "this holdfast is not part of a fleet (fleet.disabled)")
		return err
	}
	st := fs.Status
	fmt.Fprintf(w, "%-40s %-24s %-20s %-7s %8s %-20s %s\n", "INSTANCE", "ADDRESS", "VERSION", "SCHEMA", "POOL MAX", "STARTED (UTC)", "DUTIES")
	total := 0
	for _, m := range st.Members {
		total += m.PoolMax
		duties := "-"
		if m.ID == st.Instance && len(st.Duties) > 0 {
			duties = strings.Join(st.Duties, ",")
		}
		fmt.Fprintf(w, "%-40s %-24s %-20s %-7s %8d %-20s %s\n", clean(m.ID), clean(m.Address), clean(m.Version), schemaRange(m), m.PoolMax,
			m.StartedAt.UTC().Format("2006-01-02 15:04:05"), duties)
	}
	if _, err = fmt.Fprintf(w, "%s live; pool.max adds up to %d backend connections (asked through %s)\n",
		plural(len(st.Members), "instance"), total, clean(st.Instance)); err != nil {
		return err
	}
	writeMixed(w, st.Members, st.NotEverywhere, st.MembersUnrecorded)
	if st.TablesLegacy {
		if _, err := fmt.Fprintf(w, "holdfast's tables are in backend.database (%s), where the application's grants reach them: move them with holdfast migrate -move-tables\n",
			clean(st.Tables)); err != nil {
			return err
		}
	}
	return readState(w, st.NoSchema, st.Stale, st.Known, st.LastRead, st.Error)
}

// schemaRange is a member's schema versions as the fleet table shows
// them: "5-6", or "?" when it records none.
func schemaRange(m Member) string {
	if m.Kinds == nil {
		return "?"
	}
	return fmt.Sprintf("%d-%d", m.SchemaMin, m.SchemaMax)
}

// writeMixed says, per member, which controls in force it cannot apply,
// and which members record no control kinds (versions before schema
// version 6), for which that cannot be told.
func writeMixed(w io.Writer, members []Member, us []Unapplied, unrecorded bool) {
	for _, m := range members {
		var cannot []string
		for _, u := range us {
			if slices.Contains(u.NotBy, m.ID) {
				cannot = append(cannot, clean(u.Kind)+" "+clean(u.Tag))
			}
		}
		if len(cannot) > 0 {
			fmt.Fprintf(w, "CANNOT APPLY: %s (version %s) does not know the kind of %d control(s) in force: %s\n",
				clean(m.ID), clean(m.Version), len(cannot), strings.Join(cannot, ", "))
		}
	}
	switch {
	case unrecorded:
		fmt.Fprintln(w, "unknown kinds: cannot tell: the database's schema is older than version 6, so no instance records its schema range or control kinds yet (holdfast migrate adds them)")
	default:
		for _, m := range members {
			if m.Kinds == nil {
				fmt.Fprintf(w, "unknown kinds: cannot tell: %s (version %s) records no schema range or control kinds (a version before schema version 6); such versions apply drain, limit, max_txn, class and route at most\n",
					clean(m.ID), clean(m.Version))
			}
		}
	}
}

func (c *CLI) unexpected(cmd, tag, got string) error {
	return fmt.Errorf("%s %s: holdfast at %s answered %s; run holdfastctl tags to see the tag's state", cmd, tag, c.Client.Addr(), got)
}

// answeredTag is the tag holdfast named in its answer, or the one asked for
// when the answer left it empty.
func answeredTag(answered, asked string) string {
	if answered = clean(answered); answered != "" {
		return answered
	}
	return asked
}

// ParseLimit reads the N of "limit TAG N": a positive number of backend
// connections, or "off" or "0", which lift the cap (returned as 0).
func ParseLimit(s string) (int, error) {
	if strings.EqualFold(s, "off") {
		return 0, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0, usagef("limit: N must be a number of backend connections, or off (or 0) to lift the cap; got %q", s)
	}
	return n, nil
}

// CheckTag rejects what cannot name a holdfast tag: tags are 1 to 64 bytes
// of [A-Za-z0-9_.:-]. "." and ".." are refused too: they cannot be one
// segment of a URL path.
func CheckTag(tag string) error {
	switch {
	case tag == "":
		return usagef("empty tag")
	case tag == "." || tag == "..":
		return usagef("tag %q cannot be addressed through the admin API (it is a URL path step)", tag)
	case len(tag) > maxTagLen:
		return usagef("tag %q is %d bytes long; holdfast tags are at most %d", truncate(tag, 40), len(tag), maxTagLen)
	}
	bad := false
	fixed := []byte(strings.TrimSpace(tag))
	for i, ch := range fixed {
		if !tagByte(ch) {
			fixed[i], bad = '_', true
		}
	}
	if bad || len(fixed) != len(tag) {
		return usagef("tag %q has characters outside [A-Za-z0-9_.:-]; holdfast counts each such byte as '_', so try %q", tag, fixed)
	}
	return nil
}

func tagByte(ch byte) bool {
	return 'a' <= ch && ch <= 'z' || 'A' <= ch && ch <= 'Z' || '0' <= ch && ch <= '9' ||
		ch == '_' || ch == '.' || ch == ':' || ch == '-'
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
