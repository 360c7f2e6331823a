package admin

import (
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/holdfast-db/holdfast/attribution"
	"github.com/holdfast-db/holdfast/proxy"
	"github.com/holdfast-db/holdfast/proxy/pool"
)

// NewCollector returns the metrics read from srv at scrape time: the front
// end and the pool (holdfast_pool_*, holdfast_clients, ...) and, from rec
// and srv's holders and controls, the per-tag metrics (holdfast_tag_*).
// Register it on the registry the Admin serves.
func NewCollector(srv Server, rec *attribution.Recorder) prometheus.Collector {
	return collector{srv: srv, tags: attribution.NewCollector(rec, live{srv})}
}

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, labels, nil)
}

var (
	dPoolConns     = desc("holdfast_pool_connections", "Backend connections open, by state (in_use: lent to a client or to holdfast's own work; idle: in the pool).", "state")
	dPoolMax       = desc("holdfast_pool_max_connections", "The configured cap on backend connections (pool.max).")
	dPoolWaiters   = desc("holdfast_pool_waiters", "Borrowers queued for a backend connection now.")
	dPoolAcquires  = desc("holdfast_pool_acquires_total", "Backend connections lent.")
	dPoolWaits     = desc("holdfast_pool_waits_total", "Acquisitions that had to queue for a backend connection.")
	dPoolWaitSecs  = desc("holdfast_pool_wait_seconds_total", "Time borrowers spent queued for a backend connection.")
	dPoolTimeouts  = desc("holdfast_pool_timeouts_total", "Borrowers that gave up after pool.acquire_timeout (clients got error 1040 or 2003).")
	dPoolRejected  = desc("holdfast_pool_rejected_total", "Borrowers refused at once because pool.max_waiters were already queued.")
	dPoolDials     = desc("holdfast_pool_dials_total", "Backend connection attempts.")
	dPoolDialErrs  = desc("holdfast_pool_dial_errors_total", "Backend connection attempts that failed.")
	dPoolClosed    = desc("holdfast_pool_closed_total", "Backend connections closed, by reason (broken, unhealthy, lifetime, idle, swap, shrink, shutdown): dials - dial errors - closes = open.", "reason")
	dPoolDialing   = desc("holdfast_pool_dialing", "Backend connections being dialed now.")
	dPoolHeld      = desc("holdfast_pool_held_connections", "Backend connections kept out of circulation while a kill sent on them completes.")
	dBackendStmts  = desc("holdfast_backend_prepared_statements", "Prepared statements open on holdfast's backend connections.")
	dStmtBudget    = desc("holdfast_backend_prepared_statements_budget", "The most prepared statements this instance keeps on its backend connections (a share of the server's max_prepared_stmt_count).")
	dStmtRetries   = desc("holdfast_backend_prepare_retries_total", "Prepares retried after the server ran out of prepared statements (1461), having given back the ones no client held.")
	dClients       = desc("holdfast_clients", "Client connections open now.")
	dClientsTotal  = desc("holdfast_clients_accepted_total", "Client connections that completed the handshake.")
	dHandshakeFail = desc("holdfast_handshake_failures_total", "Client connections that failed the handshake (bad password, malformed, timeout).")
	dClientsRej    = desc("holdfast_clients_rejected_total", "Client connections refused (error 1040) because sessions.max_clients (reason max_clients) or the user's max_clients (reason user_max_clients) were open.", "reason")
	dUserClients   = desc("holdfast_user_clients", "Client connections open now, by the user they logged in as.", "user")
	dUserTagsDen   = desc("holdfast_user_tags_denied_total", "Statements (and logins' conn_tag attributes) whose tag is outside their user's users[].tags: run as untagged (action default_tag) or refused with error 9012 (action refused).", "user", "action")
	dLoginFails    = desc("holdfast_login_failures_total", "Failed logins (wrong password, unknown or refused user), at the handshake and COM_CHANGE_USER.")
	dLoginsWaiting = desc("holdfast_logins_waiting", "Logins waiting out the delay after failed attempts from their user and address (auth.failure_delay).")
	dCommands      = desc("holdfast_commands_total", "Client protocol commands received.")
	dPinned        = desc("holdfast_pinned_sessions", "Client sessions pinned to a backend connection now.")
	dPipelined     = desc("holdfast_pipelined_statements_total", "Autocommit SELECTs run on a backend connection shared with other clients' SELECTs (pool.pipeline_depth).")
	dPins          = desc("holdfast_pins_total", "Sessions pinned to a backend connection, by reason.", "reason")
	dShapeBlocked  = desc("holdfast_shape_blocked", "1 for a statement shape on-call blocks (its statements get error 9007).", "shape")
	dShapeLimit    = desc("holdfast_shape_limit", "The cap in force on this instance on a statement shape's statements running at once.", "shape")
	dShapeRunning  = desc("holdfast_shape_running", "Statements of a capped shape running now under its cap.", "shape")
)

type collector struct {
	srv  Server
	tags prometheus.Collector
}

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{dPoolConns, dPoolMax, dPoolWaiters, dPoolAcquires, dPoolWaits, dPoolWaitSecs,
		dPoolTimeouts, dPoolRejected, dPoolDials, dPoolDialErrs, dPoolClosed, dPoolDialing, dPoolHeld, dBackendStmts,
		dStmtBudget, dStmtRetries, dClients, dClientsTotal, dHandshakeFail, dClientsRej, dLoginFails, dLoginsWaiting,
		dCommands, dPinned, dPins, dPipelined, dShapeBlocked, dShapeLimit, dShapeRunning, dUserClients, dUserTagsDen} {
		ch <- d
	}
	c.tags.Describe(ch)
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	c.tags.Collect(ch)
	st := c.srv.Stats()
	p := st.Pool
	g := func(d *prometheus.Desc, v float64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, l...)
	}
	n := func(d *prometheus.Desc, v float64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, l...)
	}
	g(dPoolConns, float64(p.InUse), "in_use")
	g(dPoolConns, float64(p.Idle), "idle")
	g(dPoolMax, float64(p.Max))
	g(dPoolWaiters, float64(p.Waiting))
	n(dPoolAcquires, float64(p.Acquired))
	n(dPoolWaits, float64(p.Waited))
	n(dPoolWaitSecs, p.WaitTime.Seconds())
	n(dPoolTimeouts, float64(p.Timeouts))
	n(dPoolRejected, float64(p.Rejected))
	n(dPoolDials, float64(p.Dials))
	n(dPoolDialErrs, float64(p.DialErrors))
	for r := range pool.NumCloseReasons {
		n(dPoolClosed, float64(p.Closed[r]), r.String())
	}
	g(dPoolDialing, float64(p.Dialing))
	g(dPoolHeld, float64(p.Held))
	g(dBackendStmts, float64(st.BackendStatements))
	g(dStmtBudget, float64(st.StatementBudget))
	n(dStmtRetries, float64(st.StatementRetries))
	g(dClients, float64(st.ClientsActive))
	n(dClientsTotal, float64(st.ClientsTotal))
	n(dHandshakeFail, float64(st.HandshakeFailures))
	n(dClientsRej, float64(st.Rejected), "max_clients")
	n(dClientsRej, float64(st.RejectedUser), "user_max_clients")
	for _, u := range st.Users {
		g(dUserClients, float64(u.Clients), u.User)
		n(dUserTagsDen, float64(u.TagsDefaulted), u.User, "default_tag")
		n(dUserTagsDen, float64(u.TagsRefused), u.User, "refused")
	}
	n(dLoginFails, float64(st.LoginFailures))
	g(dLoginsWaiting, float64(st.LoginsWaiting))
	n(dCommands, float64(st.Commands))
	g(dPinned, float64(st.PinnedSessions))
	n(dPipelined, float64(st.Pipelined))
	for reason, v := range st.Pins {
		n(dPins, float64(v), reason)
	}
	for _, gs := range c.srv.Gates() {
		if !proxy.IsShapeKey(gs.Tag) {
			continue
		}
		shape := strings.TrimPrefix(gs.Tag, proxy.ShapePrefix)
		if gs.Drained {
			g(dShapeBlocked, 1, shape)
		}
		if gs.Limited {
			g(dShapeLimit, float64(gs.Limit), shape)
			g(dShapeRunning, float64(gs.InUse), shape)
		}
	}
}

// live is srv's holders and controls as the attribution collector reads them.
type live struct{ srv Server }

func (l live) Holders() []attribution.Holder {
	hs := l.srv.Holders()
	out := make([]attribution.Holder, len(hs))
	for i, h := range hs {
		out[i] = attribution.Holder{Tag: h.Tag, InTransaction: h.InTransaction}
	}
	return out
}

func (l live) Gates() []attribution.Gate {
	gs := l.srv.Gates()
	out := make([]attribution.Gate, 0, len(gs))
	for _, g := range gs {
		if !proxy.IsShapeKey(g.Tag) { // shapes have metrics of their own
			out = append(out, attribution.Gate{Tag: g.Tag, Drained: g.Drained, Limit: g.Limit, Limited: g.Limited})
		}
	}
	return out
}
