package fleet

import "slices"

// A fleet runs two versions of holdfast side by side during a rolling
// upgrade. Each instance's heartbeat records the schema versions it runs
// against and the kinds of control it applies (Member); an instance that
// meets a control row of a kind it does not know ignores it, visibly
// (Status.Ignored, a log line, a metric). From the members' records an
// instance tells which controls in force some instances cannot apply
// (NotEverywhere), which holdfastctl fleet and holdfastctl controls show.

// UnrecordedKinds are the kinds of control an instance that records none
// applies at most: every version before schema version 6, which added
// the record, knew these and no others. A control of another kind is not
// applied by such an instance.
func UnrecordedKinds() []Kind { return []Kind{KindDrain, KindLimit, KindMaxTxn, KindClass, KindRoute} }

// Unapplied is a control in force that some live instances cannot apply,
// being of a kind they do not know.
type Unapplied struct {
	Tag  string `json:"tag"`
	Kind Kind   `json:"kind"`
	// NotBy are those instances (their IDs): the ones that record the
	// kinds they apply, without this one, and the ones that record none
	// (a version before schema version 6) when it is not among
	// UnrecordedKinds.
	NotBy []string `json:"not_applied_by"`
	// Live is how many instances are live.
	Live int `json:"live_instances"`
}

// applies reports whether m applies controls of kind, as far as its
// record tells.
func applies(m Member, kind Kind) bool {
	if !m.Recorded() {
		return slices.Contains(UnrecordedKinds(), kind)
	}
	return slices.Contains(m.Kinds, kind)
}

// notEverywhere lists the controls in force on part of members only:
// some of them cannot apply it, and some can. They are the controls this
// instance applies, and the rows it ignores as of a kind it does not know
// (another version's, which others may apply). Rows it ignores for
// another reason (a value out of range, say), and rows no member can
// apply, are in force nowhere and not listed.
func notEverywhere(controls []Control, ignored []Ignored, members []Member) []Unapplied {
	type key struct {
		tag  string
		kind Kind
	}
	var keys []key
	for _, c := range controls {
		keys = append(keys, key{c.Tag, c.Kind})
	}
	known := KnownKinds()
	for _, ig := range ignored {
		if !slices.Contains(known, ig.Kind) {
			keys = append(keys, key{ig.Tag, ig.Kind})
		}
	}
	var out []Unapplied
	for _, k := range keys {
		u := Unapplied{Tag: k.tag, Kind: k.kind, Live: len(members)}
		for _, m := range members {
			if !applies(m, k.kind) {
				u.NotBy = append(u.NotBy, m.ID)
			}
		}
		// Applied by none (a row no live version knows): not in force
		// anywhere, and shown among the ignored rows already.
		if len(u.NotBy) > 0 && len(u.NotBy) < len(members) {
			out = append(out, u)
		}
	}
	return out
}
