package chaos

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/holdfast-db/holdfast/internal/dbtest"
	"github.com/holdfast-db/holdfast/internal/lifecycle"
	"github.com/holdfast-db/holdfast/internal/netrelay"
)

// The switchover and failover scenarios: the scenario's database lives on
// a pair of private servers of its own (GTID replication, binary logging
// on both, log_slave_updates, lossless semi-synchronous replication:
// dbtest.SemiSyncArgs, so that a killed primary takes no acknowledged
// write with it), and holdfast reaches the primary through a
// relay standing in for the VIP an HA tool moves. The run's shared server
// is left alone: a failover leaves its primary dead.
//
// holdfast's own account (the backend account: the scenarios set no
// fleet.user) has SLAVE MONITOR, which the topology checks need, and no
// SUPER or READ ONLY ADMIN: a read-only server refuses its writes.

// pair is a scenario's primary and replica behind the VIP. It belongs to
// the scenario's goroutine but for primary, which the fault goroutine
// changes while the traffic runs.
type pair struct {
	servers [2]*dbtest.Private
	vip     *netrelay.Relay
	root    *sql.DB // servers[0] as root, for setup

	mu      sync.Mutex // guards following
	primary int        // index in servers of the current primary
	// switches are the faults' moments, for the report and the notes.
	switches []switchMoment
}

// switchMoment is one switchover (planned) or failover (kill) as the
// harness did it.
type switchMoment struct {
	planned bool
	// fault: the primary read-only (planned) or killed (failover); ended:
	// the VIP moved.
	fault, ended time.Time
	steps        dbtest.SwitchoverSteps // planned
	promoted     time.Time              // failover: the replica promoted
	received     string                 // failover: the GTID position it had received and applied first
}

// startPair starts the scenario's two servers, the replica following the
// primary, the backend account on both (by replication), and the VIP at
// the primary.
func (s *scenario) startPair(ctx context.Context) error {
	p := &pair{}
	s.pair = p
	common := append([]string{"--innodb-buffer-pool-size=128M", "--max-connections=2000", "--log-slave-updates=1"}, dbtest.SemiSyncArgs...)
	for i, args := range [][]string{common, append([]string{"--server-id=2", "--read-only=1"}, common...)} {
		dir := filepath.Join(s.dir, fmt.Sprintf("s%d-server%d", s.n, i))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("chaos: %w", err)
		}
		srv, err := dbtest.NewPrivate(dir, args...)
		if err != nil {
			return err
		}
		p.servers[i] = srv
	}
	if err := p.servers[1].Follow(p.servers[0]); err != nil {
		return err
	}
	p.root = p.servers[0].Open("")
	for _, q := range []string{
		fmt.Sprintf("CREATE USER '%s'@'%%' IDENTIFIED BY '%s'", backendUser, backendUser),
		fmt.Sprintf("GRANT SLAVE MONITOR ON *.* TO '%s'@'%%'", backendUser),
	} {
		if _, err := p.root.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("chaos: %s: %w", q, err)
		}
	}
	vip, err := netrelay.Start("127.0.0.1:0", p.servers[0].Addr, 0)
	if err != nil {
		return fmt.Errorf("chaos: %w", err)
	}
	p.vip = vip
	fmt.Fprintf(s.o.Out, "   servers %s (primary) and %s (replica), VIP %s\n", p.servers[0].Addr, p.servers[1].Addr, vip.Addr())
	return nil
}

// current is the primary now.
func (p *pair) current() *dbtest.Private {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.servers[p.primary]
}

// openVIP opens a pool to database db through the VIP, as root: it
// follows the primary as the VIP moves (a connection made before a move
// stays on the server it reached).
func (p *pair) openVIP(db string) (*sql.DB, error) {
	c := mysql.NewConfig()
	c.Net, c.Addr, c.User, c.DBName = "tcp", p.vip.Addr().String(), "root", db
	c.Timeout, c.ReadTimeout, c.WriteTimeout = 2*time.Second, 10*time.Second, 10*time.Second
	d, err := sql.Open("mysql", c.FormatDSN())
	if err != nil {
		return nil, fmt.Errorf("chaos: %w", err)
	}
	d.SetConnMaxLifetime(time.Second) // reach the moved VIP's server soon
	return d, nil
}

func (p *pair) close() {
	if p.vip != nil {
		p.vip.Close()
	}
	if p.root != nil {
		p.root.Close()
	}
	for _, srv := range p.servers {
		if srv != nil {
			srv.Stop()
		}
	}
}

// switchovers switches the primary over to the other server every
// `every` until ctx is done, as an HA tool does a planned switchover
// (dbtest.Switchover: the primary read-only, the replica caught up and
// promoted, the old primary replicating from it, the VIP moved).
func (p *pair) switchovers(ctx context.Context, every time.Duration, log *faultLog) {
	for lifecycle.Sleep(ctx, every) == nil {
		p.mu.Lock()
		from, to := p.primary, 1-p.primary
		p.mu.Unlock()
		next := p.servers[to]
		st, err := dbtest.Switchover(context.Background(), p.servers[from], next, func() { p.vip.Retarget(next.Addr) })
		if err != nil {
			log.fail("fault", "switchover from %s to %s: %v", p.servers[from].Addr, next.Addr, err)
			return
		}
		p.mu.Lock()
		p.primary = to
		p.switches = append(p.switches, switchMoment{planned: true, fault: st.ReadOnly, ended: st.Moved, steps: st})
		p.mu.Unlock()
		log.add(true)
	}
}

// failover kills the primary with SIGKILL `after` into the traffic (once),
// and promotes the replica promoteAfter later, as an HA tool does: its
// relay log applied first (dbtest.PromoteApplied), then the VIP moved. The
// killed server stays down.
func (p *pair) failover(ctx context.Context, after, promoteAfter time.Duration, log *faultLog) {
	if lifecycle.Sleep(ctx, after) != nil {
		return
	}
	m := switchMoment{fault: time.Now()}
	p.servers[0].Kill()
	time.Sleep(promoteAfter)
	received, err := p.servers[1].PromoteApplied(context.Background(), 30*time.Second)
	if err != nil {
		log.fail("fault", "promote %s: %v", p.servers[1].Addr, err)
		return
	}
	m.promoted, m.received = time.Now(), received
	p.vip.Retarget(p.servers[1].Addr)
	m.ended = time.Now()
	p.mu.Lock()
	p.primary = 1
	p.switches = append(p.switches, m)
	p.mu.Unlock()
	log.add(true)
}

// switchNotes are the report's lines on the switches: when each came and
// how long it took, and how the calls fared around them: the longest call
// that overlapped a switch, and, after a failover, how soon the first call
// was answered after the promotion.
func (p *pair) switchNotes(start time.Time, calls []Call) []string {
	p.mu.Lock()
	sw := slices.Clone(p.switches)
	p.mu.Unlock()
	var out []string
	for i, m := range sw {
		var what string
		if m.planned {
			what = fmt.Sprintf("switchover %d at +%.1fs: read-only → caught up %s → promoted %s → VIP moved %s",
				i+1, m.fault.Sub(start).Seconds(), ms(m.steps.CaughtUp.Sub(m.fault)), ms(m.steps.Promoted.Sub(m.fault)), ms(m.ended.Sub(m.fault)))
		} else {
			what = fmt.Sprintf("primary killed at +%.1fs, replica promoted %s later (relay log up to %s applied first), VIP moved %s after the kill",
				m.fault.Sub(start).Seconds(), ms(m.promoted.Sub(m.fault)), m.received, ms(m.ended.Sub(m.fault)))
		}
		var longest time.Duration
		codes := map[string]int{}
		first := time.Duration(-1)
		for i := range calls {
			c := &calls[i]
			if c.Start.Before(m.ended) && c.End.After(m.fault) {
				longest = max(longest, c.End.Sub(c.Start))
				if c.Kind != Answered {
					codes[c.answerLabel()]++
				}
			}
			if !m.planned && c.Kind == Answered && c.End.After(m.promoted) && (first < 0 || c.End.Sub(m.promoted) < first) {
				first = c.End.Sub(m.promoted)
			}
		}
		unanswered := "none"
		if len(codes) > 0 {
			unanswered = counts(codes)
		}
		what += fmt.Sprintf("; calls overlapping it: longest %s, not answered: %s", ms(longest), unanswered)
		if !m.planned {
			what += fmt.Sprintf("; first call answered %s after the promotion", ms(first))
		}
		out = append(out, what)
	}
	return out
}

func ms(d time.Duration) string {
	if d < 0 {
		return "never"
	}
	return fmt.Sprintf("%d ms", d.Milliseconds())
}
