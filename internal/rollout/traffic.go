package rollout

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"
)

// The tags of the traffic. drainedTag is drained and cappedTag capped
// fleet-wide for the whole run; checkoutTag is free.
const (
	checkoutTag = "rollout_checkout"
	drainedTag  = "rollout_drained"
	cappedTag   = "rollout_capped"
	// capMark is in the text of every statement of cappedTag, so that the
	// sampler finds them in the server's process list.
	capMark = "rollout-cap-mark"
	// futureTag has a control row of futureKind, a kind no version knows
	// (as a later version's would be): every instance must keep working,
	// and N must show it ignored.
	futureTag  = "rollout_other"
	futureKind = "rollout_future"
)

// The refusals the controls dictate: a drained tag's statement (9001),
// and a wait under a cap that ran out (9002).
const (
	codeDrained = 9001
	codeCapped  = 9002
)

// Kinds of work, as the report counts them.
const (
	workCheckout = "checkout transaction"
	workDrained  = "drained-tag statement"
	workCapped   = "capped-tag statement"
	workEngine   = "engine call"
)

// maxListed bounds the unexpected answers a report lists one by one (all
// are counted).
const maxListed = 20

// tally counts the answers of every kind of work by version, and keeps
// the unexpected ones. Safe for concurrent use.
type tally struct {
	mu     sync.Mutex // guards following
	counts map[[3]string]int
	bad    []string // the first maxListed unexpected answers
	nbad   int
}

// add counts one answer of work on in; bad, when not "", says why it
// was not an answer its client may get.
func (t *tally) add(in *instance, work, answer, bad string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.counts == nil {
		t.counts = map[[3]string]int{}
	}
	t.counts[[3]string{work, in.version, answer}]++
	if bad != "" {
		t.nbad++
		if len(t.bad) < maxListed {
			t.bad = append(t.bad, fmt.Sprintf("%s %s on %s: %s", time.Now().Format("15:04:05.000"), work, in, bad))
		}
	}
}

// count is how many answers of work by version were answer ("" any).
func (t *tally) count(work, version, answer string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for k, v := range t.counts {
		if k[0] == work && k[1] == version && (answer == "" || k[2] == answer) {
			n += v
		}
	}
	return n
}

// answers lists work's answers on version, sorted, as "answer n".
func (t *tally) answers(work, version string) []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []string
	for k, v := range t.counts {
		if k[0] == work && k[1] == version {
			out = append(out, fmt.Sprintf("%s %d", k[2], v))
		}
	}
	slices.Sort(out)
	return out
}

// answerOf is err as a report counts it: "ok", the MySQL error code, or
// "connection error".
func answerOf(err error) string {
	var me *mysql.MySQLError
	switch {
	case err == nil:
		return "ok"
	case errors.As(err, &me):
		return strconv.Itoa(int(me.Number))
	}
	return "connection error"
}

func codeOf(err error) uint16 {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		return me.Number
	}
	return 0
}

// workTimeout bounds one unit of work (a hang guard: holdfast answers
// every statement within its own bounds).
const workTimeout = 30 * time.Second

// checkout is one checkout client: transactions that count the client's
// rows and add one, tagged checkoutTag, one after another until ctx is
// done. committed is how many it committed; a count that does not match
// it is a violation.
type checkout struct {
	id        int
	bal       *balancer
	t         *tally
	committed int
}

func (c *checkout) run(ctx context.Context) {
	for ctx.Err() == nil {
		in := c.bal.pick()
		err := c.txn(in)
		in.done()
		bad := ""
		if err != nil {
			bad = err.Error()
		}
		c.t.add(in, workCheckout, answerOf(err), bad)
		sleep(ctx, 10*time.Millisecond)
	}
}

// txn runs one transaction on in: the client's rows, counted, must be
// the ones it committed; then it adds one and commits.
func (c *checkout) txn(in *instance) (err error) {
	ctx, cancel := context.WithTimeout(context.Background(), workTimeout)
	defer cancel()
	conn, err := in.db.Conn(ctx)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			// Not back to the pool in a transaction: discard it.
			_ = conn.Raw(func(any) error { return driver.ErrBadConn })
		}
		conn.Close()
	}()
	const tag = "/* conn_tag:" + checkoutTag + " */ "
	if _, err := conn.ExecContext(ctx, "BEGIN"); err != nil {
		return err
	}
	var n int
	if err := conn.QueryRowContext(ctx, tag+"SELECT COUNT(*) FROM "+appDB+".orders WHERE client = ?", c.id).Scan(&n); err != nil {
		return err
	}
	if n != c.committed {
		return fmt.Errorf("client %d counted %d rows of its own, and committed %d", c.id, n, c.committed)
	}
	if _, err := conn.ExecContext(ctx, tag+"INSERT INTO "+appDB+".orders (client, seq, version) VALUES (?, ?, ?)", c.id, c.committed+1, in.version); err != nil {
		return err
	}
	if _, err := conn.ExecContext(ctx, "COMMIT"); err != nil {
		return err
	}
	c.committed++
	return nil
}

// drained runs statements of drainedTag until ctx is done: each must be
// refused with 9001, by every version.
func drained(ctx context.Context, bal *balancer, t *tally) {
	for ctx.Err() == nil {
		in := bal.pick()
		wctx, cancel := context.WithTimeout(context.Background(), workTimeout)
		var n int
		err := in.db.QueryRowContext(wctx, "/* conn_tag:"+drainedTag+" */ SELECT COUNT(*) FROM "+appDB+".orders").Scan(&n)
		cancel()
		in.done()
		bad := ""
		switch {
		case err == nil:
			bad = "served while its tag was drained"
		case codeOf(err) != codeDrained:
			bad = err.Error()
		}
		t.add(in, workDrained, answerOf(err), bad)
		sleep(ctx, 20*time.Millisecond)
	}
}

// capped runs statements of cappedTag that hold their connection for
// hold, until ctx is done: each is answered, or refused with 9002 by a
// wait under the cap that ran out.
func capped(ctx context.Context, bal *balancer, t *tally, hold time.Duration) {
	q := fmt.Sprintf("/* conn_tag:%s */ SELECT '%s', SLEEP(%.3f)", cappedTag, capMark, hold.Seconds())
	for ctx.Err() == nil {
		in := bal.pick()
		wctx, cancel := context.WithTimeout(context.Background(), workTimeout)
		var mark string
		var slept int
		err := in.db.QueryRowContext(wctx, q).Scan(&mark, &slept)
		cancel()
		in.done()
		bad := ""
		if err != nil && codeOf(err) != codeCapped {
			bad = err.Error()
		}
		t.add(in, workCapped, answerOf(err), bad)
	}
}

// capSampler samples, every few milliseconds, how many statements of the
// capped tag run on the server at once, fleet-wide: those in the process
// list whose text holds capMark, inside their SLEEP (so a statement
// whose answer was sent, and whose slot under the cap another may have
// taken, is not counted).
type capSampler struct {
	mu      sync.Mutex // guards following
	samples int
	max     int
	over    []string // samples over the cap, the first maxListed
	nover   int
}

func (s *capSampler) run(ctx context.Context, root *sql.DB, capN int) {
	q := "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE STATE = 'User sleep' AND INFO LIKE '%" + capMark + "%'"
	for ctx.Err() == nil {
		var n int
		if err := root.QueryRowContext(ctx, q).Scan(&n); err == nil {
			s.mu.Lock()
			s.samples++
			s.max = max(s.max, n)
			if n > capN {
				s.nover++
				if len(s.over) < maxListed {
					s.over = append(s.over, fmt.Sprintf("%s: %d statements of %s running at once, over the cap of %d",
						time.Now().Format("15:04:05.000"), n, cappedTag, capN))
				}
			}
			s.mu.Unlock()
		}
		sleep(ctx, 5*time.Millisecond)
	}
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
