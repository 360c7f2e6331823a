package chaos

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/holdfast-db/holdfast/internal/dbtest"
)

// shopID is the one shop of the harness.
const shopID = 1

// client is one checkout client: one connection to one holdfast instance
// at a time, running orders one after another. It belongs to one
// goroutine; its journal is read after that goroutine ends.
type client struct {
	id       int
	instance int
	db       *sql.DB // holdfast instance's pool; the client holds one conn
	conn     *sql.Conn
	rng      *rand.Rand
	o        *Options
	prefix   string // of idempotency keys: unique per scenario and client
	tag      string // conn_tag of its calls ("" none)
	seq      int
	journal  []Call
	// readOwn: read each reservation back after its reserve (the replica
	// scenario); what those reads found wrong.
	ryw        bool
	tables     string // the schema of holdfast's tables, which readOwn reads through holdfast
	ownReads   int
	violations []Violation
	// pick, when not nil, chooses the instance (and db) of each call,
	// whose connection goes back to db's pool when the call ends; replay
	// repeats each answered reserve and claim once (EngineClient).
	pick   Picker
	replay bool
}

// run places orders until ctx is done. Each order finishes its retries
// (within RetryBudget) even after ctx is done.
func (c *client) run(ctx context.Context) {
	defer func() {
		if c.conn != nil {
			c.conn.Close()
		}
	}()
	for ctx.Err() == nil {
		c.order()
	}
}

// order reserves, then claims (70%), releases (20%) or abandons (10%) the
// reservation, as a checkout does.
func (c *client) order() {
	c.seq++
	key := c.prefix + strconv.Itoa(c.seq)
	req, locs := c.pickLines()
	res := c.repeat(func() Call { return c.reserve(key, req, locs, c.o.TTL) })
	if res.Kind != Answered {
		return
	}
	if c.ryw && res.Token != "" {
		c.readOwn(key)
	}
	if c.replay {
		c.repeat(func() Call { return c.reserve(key, req, locs, c.o.TTL) })
	}
	switch n := c.rng.IntN(100); {
	case n < 70:
		if r := c.repeat(func() Call { return c.claim(res.Token) }); c.replay && r.Kind == Answered {
			c.repeat(func() Call { return c.claim(res.Token) })
		}
	case n < 90:
		c.repeat(func() Call { return c.release(res.Token) })
	}
}

// repeat makes the call until it gets an answer the client does not
// retry, or RetryBudget has passed; it returns the last call.
func (c *client) repeat(call func() Call) Call {
	deadline := time.Now().Add(c.o.RetryBudget)
	for {
		r := call()
		c.journal = append(c.journal, r)
		if !r.retryable() || time.Now().After(deadline) {
			return r
		}
		time.Sleep(time.Duration(50+c.rng.IntN(200)) * time.Millisecond)
	}
}

// pickLines picks 1 to 3 distinct items, 1 to 3 units each, and their
// candidate locations. A line is for a scarce item (which sells out) one
// time in ten, and for the one hot item (the first after the scarce ones)
// two times in ten.
func (c *client) pickLines() ([]Line, [][]int64) {
	n := 1
	switch r := c.rng.IntN(10); {
	case r >= 9:
		n = 3
	case r >= 6:
		n = 2
	}
	var lines []Line
	var locs [][]int64
	used := map[int64]bool{}
	for len(lines) < n {
		var item int64
		switch r := c.rng.IntN(10); {
		case r == 0 && c.o.ScarceItems > 0:
			item = int64(1 + c.rng.IntN(c.o.ScarceItems)) // scarce: sells out
		case r < 3:
			item = int64(c.o.ScarceItems + 1) // the hot item
		default:
			item = int64(1 + c.rng.IntN(c.o.Items))
		}
		if used[item] {
			continue
		}
		used[item] = true
		lines = append(lines, Line{Item: item, Qty: int64(1 + c.rng.IntN(3))})
		locs = append(locs, [][]int64{{1, 2}, {2, 1}, {1}, {2}}[c.rng.IntN(4)])
	}
	return lines, locs
}

func linesJSON(req []Line, locs [][]int64) string {
	var b strings.Builder
	b.WriteByte('[')
	for i, l := range req {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"item":%d,"qty":%d,"locations":[`, l.Item, l.Qty)
		for j, g := range locs[i] {
			if j > 0 {
				b.WriteByte(',')
			}
			b.WriteString(strconv.FormatInt(g, 10))
		}
		b.WriteString("]}")
	}
	b.WriteByte(']')
	return b.String()
}

func (c *client) reserve(key string, req []Line, locs [][]int64, ttl time.Duration) Call {
	r := Call{Proc: procReserve, Key: key, Request: req, Locations: locs}
	rows := c.do(&r, "CALL holdfast.reserve(?, ?, ?, ?)", shopID, key, linesJSON(req, locs), int64(ttl/time.Second))
	if r.Kind != Answered {
		return r
	}
	// token, expires_at, line_no, item, group, quantity, state, replayed
	if len(rows) == 0 {
		r.answerShape("no rows")
	}
	for i, row := range rows {
		if len(row) != 8 {
			r.answerShape(fmt.Sprintf("row %d has %d columns, want 8", i+1, len(row)))
			return r
		}
		if i == 0 {
			r.Token = row[0]
			r.Replayed = row[7] == "1"
		} else if row[0] != r.Token {
			r.answerShape(fmt.Sprintf("row %d has token %s, row 1 %s", i+1, row[0], r.Token))
			return r
		}
		r.Lines = append(r.Lines, Line{Item: atoi(row[3]), Group: atoi(row[4]), Qty: atoi(row[5])})
	}
	return r
}

func (c *client) claim(token string) Call {
	r := Call{Proc: procClaim, Token: token}
	rows := c.do(&r, "CALL holdfast.claim(?)", token)
	if r.Kind != Answered {
		return r
	}
	// token, outcome, line_no, item, group, quantity
	if len(rows) == 0 {
		r.answerShape("no rows")
	}
	for i, row := range rows {
		if len(row) != 6 || row[0] != token {
			r.answerShape(fmt.Sprintf("row %d is %q", i+1, row))
			return r
		}
		r.Outcome = row[1]
		r.Lines = append(r.Lines, Line{Item: atoi(row[3]), Group: atoi(row[4]), Qty: atoi(row[5])})
	}
	return r
}

func (c *client) release(token string) Call {
	r := Call{Proc: procRelease, Token: token}
	rows := c.do(&r, "CALL holdfast.release(?)", token)
	if r.Kind != Answered {
		return r
	}
	// token, outcome, quantity
	if len(rows) != 1 || len(rows[0]) != 3 || rows[0][0] != token {
		r.answerShape(fmt.Sprintf("rows %q", rows))
		return r
	}
	r.Outcome, r.Qty = rows[0][1], atoi(rows[0][2])
	return r
}

// answerShape marks an answer whose result set is not what the procedure
// documents; the judge counts it as a violation.
func (r *Call) answerShape(why string) {
	r.Outcome = "malformed: " + why
}

// do runs the call on the client's connection (making one if it has none)
// and returns its rows as strings (NULL as "").
func (c *client) do(r *Call, q string, args ...any) [][]string {
	if c.pick != nil {
		inst, db, done := c.pick()
		c.instance, c.db = inst, db
		defer func() {
			if c.conn != nil {
				c.conn.Close()
				c.conn = nil
			}
			done()
		}()
	}
	r.Client, r.Instance, r.Tag = c.id, c.instance, c.tag
	if c.tag != "" {
		q = "/* conn_tag:" + c.tag + " */ " + q
	}
	r.Start = time.Now()
	ctx := context.Background() // the driver's read timeout bounds the call
	if c.conn == nil {
		conn, err := c.db.Conn(ctx)
		if err != nil {
			r.End = time.Now()
			r.Kind, r.Msg = NotSent, err.Error()
			return nil
		}
		c.conn = conn
	}
	var out [][]string
	rows, err := c.conn.QueryContext(ctx, q, args...)
	if err == nil {
		for rows.Next() {
			var row []string
			if row, err = dbtest.ScanStrings(rows); err != nil {
				break
			}
			out = append(out, row)
		}
		if err == nil {
			err = rows.Err()
		}
		if cerr := rows.Close(); err == nil {
			err = cerr
		}
	}
	r.End = time.Now()
	if !r.classify(err, c.o.AnswerTimeout) {
		c.conn.Close()
		c.conn = nil
	}
	return out
}

func atoi(s string) int64 {
	v, _ := strconv.ParseInt(s, 10, 64)
	return v
}
