package proxy

import (
	"context"
	"errors"
	"strconv"
	"strings"

	"github.com/holdfast-db/holdfast/attribution"
	"github.com/holdfast-db/holdfast/proxy/controls"
	"github.com/holdfast-db/holdfast/proxy/mysqlwire"
	"github.com/holdfast-db/holdfast/proxy/sqlscan"
)

// On-call controls per statement shape: a runaway statement that is not
// tied to one tag is blocked, or its concurrency capped, by its shape (the
// hash of its digest, sqlscan.Info.Shape, computed in the one lexing pass).
// The controls reuse the tag controls' sources and merging (controls.go)
// and their gates (gate.go), under keys "shape/<16 hex digits>": a block is
// a drain without grace, a cap a limit on statements running at once.
//
// A shape control acts per statement, not per borrow: it is passed before
// the statement borrows a connection (a capped statement waits without
// holding one) and, inside a transaction, before it runs on the
// transaction's connection. KILL, COMMIT and ROLLBACK pass always, so a
// client can always end its transaction. A cap counts only the statements
// that started after it was set.

// ShapePrefix starts the key under which the controls know a shape. A '/'
// is never in a tag, so the keys of shapes and tags never meet.
const ShapePrefix = controls.ShapePrefix

// ShapeKey is the control key of shape h.
func ShapeKey(h uint64) string { return ShapePrefix + FormatShape(h) }

// FormatShape writes shape h as on-call reads and types it: 16 lower-case
// hex digits.
func FormatShape(h uint64) string {
	s := strconv.FormatUint(h, 16)
	return strings.Repeat("0", 16-len(s)) + s
}

// ParseShape reads a shape as FormatShape writes it, with or without the
// "shape/" prefix, in either letter case.
func ParseShape(s string) (uint64, bool) {
	s = strings.TrimPrefix(s, ShapePrefix)
	if len(s) != 16 {
		return 0, false
	}
	h, err := strconv.ParseUint(s, 16, 64)
	return h, err == nil
}

// IsShapeKey reports whether a control key names a shape, not a tag.
func IsShapeKey(key string) bool { return controls.IsShapeKey(key) }

var (
	// Their texts end the messages built on them (see gates.drainErr and
	// limitErr).
	errShapeBlocked = errors.New("statements of this shape are refused until it is unblocked")
	errShapeLimit   = errors.New("no slot under the cap came free within pool.acquire_timeout")
)

// gatesFor returns the gates that hold a control key's controls.
func (s *Server) gatesFor(key string) *gates {
	if IsShapeKey(key) {
		return &s.shapeGates
	}
	return &s.gates
}

// shapeExempt reports whether a statement passes the shape controls
// whatever its shape: it ends a transaction or kills.
func shapeExempt(info *sqlscan.Info) bool {
	switch info.Kind {
	case sqlscan.KindKill, sqlscan.KindCommit, sqlscan.KindRollback:
		return true
	}
	return info.Features&sqlscan.FeatKill != 0
}

// admitShape passes one statement through its shape's controls, waiting up
// to the pool's acquire timeout (as a borrow waits)
// for a slot under a cap. It returns the key the statement was counted
// under ("" if none), which the caller must exit once the statement's
// answer is relayed; a refusal is 9007 (blocked) or 9008 (no slot in
// time), counted under tag.
func (s *session) admitShape(info *sqlscan.Info, tag *attribution.Tag) (string, *mysqlwire.SQLError) {
	g := &s.srv.shapeGates
	if shapeExempt(info) {
		return "", nil
	}
	key := ShapeKey(info.Shape)
	if g.free(key) {
		return "", nil
	}
	ctx, cancel := context.WithTimeout(s.srv.ctx, s.srv.pool.Limits().AcquireTimeout)
	counted, err := g.enter(ctx, key)
	cancel()
	switch {
	case err == nil && counted:
		return key, nil
	case err == nil:
		return "", nil
	case errors.Is(err, errShapeBlocked):
		tag.Rejected(attribution.RejectShapeBlocked)
		return "", newErr(codeShapeBlocked, "HY000", "holdfast: %v", err)
	default:
		tag.Rejected(attribution.RejectShapeLimit)
		return "", newErr(codeShapeLimit, "HY000", "holdfast: %v", err)
	}
}
