package bench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/holdfast-db/holdfast/internal/rawmysql"
	"github.com/holdfast-db/holdfast/proxy/mysqlwire"
)

// The workloads of ModeReserve (`make bench-reserve`): three ways for a
// client to take one unit of one hot item, all through holdfast.
const (
	// WorkloadTxn (a): the transactional counter baseline, BEGIN; guarded
	// UPDATE of the counter row; INSERT of a reservation record; COMMIT.
	// Four round trips with the counter's row lock held across three.
	WorkloadTxn = "a"
	// WorkloadUpdate (b): one autocommit guarded UPDATE of the counter row.
	// Keeps no reservation record: the ceiling of a hot row.
	WorkloadUpdate = "b"
	// WorkloadCall (c): CALL holdfast.reserve, one unit, a unique
	// idempotency key per call.
	WorkloadCall = "c"
	// WorkloadShadow (d): the same CALL through a second holdfast whose
	// reservation.redis puts a legacy Redis counter beside the engine with
	// authority redis (shadow mode): Redis decides each reserve, the engine
	// runs it too. Against (c), the cost of the dual write.
	WorkloadShadow = "d"
	// WorkloadVariant (e): the same CALL as (c) through a second holdfast
	// that differs from the first by ReserveOptions.Settings, or is built
	// from ReserveOptions.ERepo: an experiment measured against (c) in the
	// same rounds, rotated with it, and never judged.
	WorkloadVariant = "e"
)

// ReserveWorkloads is the order of the workloads in the first round; later
// rounds rotate it (reserveOrder).
var ReserveWorkloads = []string{WorkloadTxn, WorkloadUpdate, WorkloadCall, WorkloadShadow}

// workloadName is a workload's label in the report.
func workloadName(w string) string {
	switch w {
	case WorkloadTxn:
		return "(a) txn counter"
	case WorkloadUpdate:
		return "(b) autocommit UPDATE"
	case WorkloadCall:
		return "(c) holdfast.reserve"
	case WorkloadShadow:
		return "(d) reserve, redis shadow"
	case WorkloadVariant:
		return "(e) reserve, variant"
	}
	return w
}

// reserveOrder is the workload order of round (1-based): the list rotated
// by round-1, so each workload runs first, second and third in turn.
func reserveOrder(ws []string, round int) []string {
	if len(ws) == 0 {
		return nil
	}
	k := (round - 1) % len(ws)
	return append(slices.Clone(ws[k:]), ws[:k]...)
}

// Outcomes of one operation (one reservation attempt).
type opOutcome uint8

const (
	opReserved opOutcome = iota // took one unit
	opSoldOut                   // the counter guard or 9101: nothing left
	opBusy                      // 9107: holdfast gave up under contention; nothing reserved
	opFailed                    // any other ERR reply, or an answer that does not parse
)

// Error codes of CALL holdfast.reserve the load generator tells apart
// (docs/reservation.md).
const (
	codeInsufficient = 9101
	codeBusy         = 9107
)

// worker is one client connection's state during a run. Op implementations
// may use every field; each worker belongs to one goroutine.
type worker struct {
	c     *rawmysql.Conn
	id    int // client number, 0-based
	seq   int // operations started on this connection
	ids   []uint64
	fail  string // the first opFailed explanation
	lat   []time.Duration
	count [4]int64 // by opOutcome
}

// Op performs one reservation attempt on w.c. It returns an error only
// when the connection can no longer be used; ERR replies are outcomes.
type Op func(w *worker) (opOutcome, error)

// LoadSpec is one measured run: Clients connections to Endpoint, each
// running Op back to back for Duration.
type LoadSpec struct {
	Endpoint Endpoint
	Database string
	Clients  int
	Duration time.Duration
	Op       Op
	// DialParallel caps concurrent logins; zero means 32.
	DialParallel int
	// Started, when not nil, is called once every connection has logged
	// in, just before the operations phase; Finished right after it, while
	// the connections are still open. For sampling CPU and the like.
	Started, Finished func()
}

// LoadResult is what a run measured on the client side.
type LoadResult struct {
	Reserved, SoldOut, Busy, Failed int64
	// Wall runs from the common start to the end of the last operation.
	Wall time.Duration
	// P50, P99, Max are of every answered operation (reserved, sold out,
	// busy or failed), send of the first statement to the end of the
	// last reply.
	P50, P99, Max time.Duration
	// IDs are the reservation ids of the tokens CALL holdfast.reserve
	// returned (WorkloadCall only), sorted.
	IDs []uint64
	// Broken counts connections lost to an I/O or protocol error;
	// FirstErr is the first such error or failure, for the report.
	Broken   int
	FirstErr string
}

// Rate is reservations per second.
func (r LoadResult) Rate() float64 {
	if r.Wall <= 0 {
		return 0
	}
	return float64(r.Reserved) / r.Wall.Seconds()
}

// RunLoad opens every connection, then runs the operations phase. ctx
// cancels it (connections are closed under the clients). It returns an
// error when not every connection could log in.
func RunLoad(ctx context.Context, s LoadSpec) (LoadResult, error) {
	if s.Clients < 1 || s.Duration <= 0 || s.Op == nil {
		return LoadResult{}, errors.New("bench: a load run needs Clients, Duration and Op")
	}
	par := s.DialParallel
	if par <= 0 {
		par = 32
	}
	workers := make([]*worker, s.Clients)
	defer func() {
		for _, w := range workers {
			if w != nil && w.c != nil {
				w.c.Close()
			}
		}
	}()
	sem := make(chan struct{}, par)
	errs := make([]error, s.Clients)
	var wg sync.WaitGroup
	for i := range workers {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			c, err := s.Endpoint.Dial(ctx, s.Database)
			if err != nil {
				errs[i] = err
				return
			}
			workers[i] = &worker{c: c, id: i, lat: make([]time.Duration, 0, 1024)}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return LoadResult{}, fmt.Errorf("bench: %d clients: %w", s.Clients, err)
	}

	// Bound every read and write: a hung server must not hang the bench.
	hard := time.Now().Add(s.Duration + 2*time.Minute)
	for _, w := range workers {
		_ = w.c.SetDeadline(hard)
	}
	stop := context.AfterFunc(ctx, func() {
		for _, w := range workers {
			_ = w.c.SetDeadline(time.Now())
		}
	})
	defer stop()

	if s.Started != nil {
		s.Started()
	}
	start := time.Now()
	end := start.Add(s.Duration)
	broken := make([]error, s.Clients)
	for i, w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() {
				if p := recover(); p != nil {
					broken[i] = fmt.Errorf("bench: client panicked: %v", p)
				}
			}()
			for time.Now().Before(end) {
				t0 := time.Now()
				w.seq++
				o, err := s.Op(w)
				if err != nil {
					broken[i] = err
					return
				}
				w.lat = append(w.lat, time.Since(t0))
				w.count[o]++
			}
		}()
	}
	wg.Wait()
	res := LoadResult{Wall: time.Since(start)}
	if s.Finished != nil {
		s.Finished()
	}

	var all []time.Duration
	for i, w := range workers {
		all = append(all, w.lat...)
		res.Reserved += w.count[opReserved]
		res.SoldOut += w.count[opSoldOut]
		res.Busy += w.count[opBusy]
		res.Failed += w.count[opFailed]
		res.IDs = append(res.IDs, w.ids...)
		if broken[i] != nil {
			res.Broken++
			if res.FirstErr == "" {
				res.FirstErr = fmt.Sprintf("client %d: %v", i, broken[i])
			}
		}
		if w.fail != "" && res.FirstErr == "" {
			res.FirstErr = fmt.Sprintf("client %d: %s", i, w.fail)
		}
	}
	slices.Sort(all)
	slices.Sort(res.IDs)
	if len(all) > 0 {
		res.P50, res.P99, res.Max = percentile(all, 0.50), percentile(all, 0.99), all[len(all)-1]
	}
	return res, ctx.Err()
}

// outcomeOf sorts an error from Exec: an ERR reply is an outcome (9101 sold
// out, 9107 busy, anything else failed, noted on w); anything else breaks
// the connection and is returned.
func outcomeOf(w *worker, err error) (opOutcome, error) {
	var se *mysqlwire.SQLError
	if !errors.As(err, &se) {
		return opFailed, err
	}
	switch se.Code {
	case codeInsufficient:
		return opSoldOut, nil
	case codeBusy:
		return opBusy, nil
	}
	if w.fail == "" {
		w.fail = err.Error()
	}
	return opFailed, nil
}

// Statements of the counter workloads. The counter and the baseline's
// reservation table are created by the harness (reserveSchema).
const (
	sqlTakeCounter = "UPDATE counter SET available = available - 1 WHERE id = 1 AND available >= 1"
	// sqlInsertBaseline is a reservation record like holdfast's: an
	// idempotency key (unique), the item, the quantity and the expiry.
	sqlInsertBaseline = "INSERT INTO reservations_baseline (idempotency_key, item, quantity, expires_at) " +
		"VALUES ('%s', %d, 1, UTC_TIMESTAMP(6) + INTERVAL %d SECOND)"
)

// TxnOp is workload (a): run tags the idempotency keys, so a run's rows
// are told from another's.
func TxnOp(run string, item int64, ttl int) Op {
	return func(w *worker) (opOutcome, error) {
		if _, err := w.c.Exec("BEGIN", nil); err != nil {
			return outcomeOf(w, err)
		}
		rollback := func(o opOutcome, err error) (opOutcome, error) {
			if _, rerr := w.c.Exec("ROLLBACK", nil); rerr != nil {
				var se *mysqlwire.SQLError
				if !errors.As(rerr, &se) {
					return opFailed, rerr
				}
			}
			return o, err
		}
		r, err := w.c.Exec(sqlTakeCounter, nil)
		if err != nil {
			return rollback(outcomeOf(w, err))
		}
		if r.Affected == 0 {
			return rollback(opSoldOut, nil)
		}
		key := run + "-" + strconv.Itoa(w.id) + "-" + strconv.Itoa(w.seq)
		if _, err := w.c.Exec(fmt.Sprintf(sqlInsertBaseline, key, item, ttl), nil); err != nil {
			return rollback(outcomeOf(w, err))
		}
		if _, err := w.c.Exec("COMMIT", nil); err != nil {
			return outcomeOf(w, err)
		}
		return opReserved, nil
	}
}

// UpdateOp is workload (b).
func UpdateOp() Op {
	return func(w *worker) (opOutcome, error) {
		r, err := w.c.Exec(sqlTakeCounter, nil)
		if err != nil {
			return outcomeOf(w, err)
		}
		if r.Affected == 0 {
			return opSoldOut, nil
		}
		return opReserved, nil
	}
}

// ReserveCall is the statement of workload (c).
func ReserveCall(shop, item, location int64, key string, ttl int) string {
	return fmt.Sprintf(`CALL holdfast.reserve(%d, '%s', '[{"item":%d,"qty":1,"locations":[%d]}]', %d)`,
		shop, key, item, location, ttl)
}

// CallOp is workload (c) on pool k; run tags the idempotency keys.
func CallOp(run string, k PoolKey, ttl int) Op {
	return func(w *worker) (opOutcome, error) {
		key := run + "-" + strconv.Itoa(w.id) + "-" + strconv.Itoa(w.seq)
		var id uint64
		rows := 0
		r, err := w.c.Exec(ReserveCall(k.Shop, k.Item, k.Location, key, ttl), func(cols [][]byte) error {
			rows++
			var err error
			id, err = parseReserveRow(cols, k)
			return err
		})
		if err == nil && (r.Rows != 1 || rows != 1) {
			err = fmt.Errorf("%w: %d rows, want 1", errBadAnswer, r.Rows)
		}
		if err != nil {
			var se *mysqlwire.SQLError
			if errors.As(err, &se) || !errors.Is(err, errBadAnswer) {
				return outcomeOf(w, err)
			}
			if w.fail == "" {
				w.fail = err.Error()
			}
			return opFailed, nil
		}
		w.ids = append(w.ids, id)
		return opReserved, nil
	}
}

// errBadAnswer marks a reserve answer that parsed but is not what a fresh
// one-unit reserve must return.
var errBadAnswer = errors.New("bench: unexpected reserve answer")

// parseReserveRow checks one row of reserve's result (token, expires_at,
// line_no, inventory_item_id, inventory_group_id, quantity, state,
// replayed) for a fresh one-unit reservation of pool k, and returns the
// reservation id its token carries.
func parseReserveRow(cols [][]byte, k PoolKey) (uint64, error) {
	if len(cols) != 8 {
		return 0, fmt.Errorf("%w: %d columns, want 8", errBadAnswer, len(cols))
	}
	tok := string(cols[0])
	hex, ok := strings.CutPrefix(tok, "rsv_")
	id, err := strconv.ParseUint(hex, 16, 64)
	if !ok || len(hex) != 16 || err != nil || id == 0 {
		return 0, fmt.Errorf("%w: token %q", errBadAnswer, tok)
	}
	want := []struct {
		i    int
		name string
		v    string
	}{
		{2, "line_no", "1"},
		{3, "inventory_item_id", strconv.FormatInt(k.Item, 10)},
		{4, "inventory_group_id", strconv.FormatInt(k.Location, 10)},
		{5, "quantity", "1"},
		{6, "state", "active"},
		{7, "replayed", "0"},
	}
	for _, x := range want {
		if string(cols[x.i]) != x.v {
			return 0, fmt.Errorf("%w: %s %q, want %q", errBadAnswer, x.name, cols[x.i], x.v)
		}
	}
	if len(cols[1]) == 0 {
		return 0, fmt.Errorf("%w: no expires_at", errBadAnswer)
	}
	return id, nil
}
