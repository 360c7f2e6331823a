package chaos

import (
	"context"
	"database/sql"
	"math/rand/v2"
	"time"
)

// The harness's checkout workload and its judge, for harnesses that run
// holdfast instances of their own (internal/rollout): clients that place
// orders through CALL holdfast.* on the instances a Picker chooses, and a
// judge of their journal against the database, with the same checks as a
// scenario's (true answers, each success exactly once, conservation of
// units, the stock invariant).

// ClientUser is the account the clients log in to holdfast as (its
// password is the name): a harness configures holdfast's users with it.
const ClientUser = clientUser

// ClientDSN is a go-sql-driver DSN for ClientUser at addr: interpolate
// picks the text protocol over prepared statements; readTimeout bounds
// the wait for an answer.
func ClientDSN(addr string, interpolate bool, readTimeout time.Duration) string {
	return clientDSN(addr, interpolate, readTimeout)
}

// Picker chooses the holdfast instance of a client's next call: its
// number (the journal's Call.Instance) and a pool of client connections to
// it. done is called once the call has ended and its connection is back
// in the pool. A Picker is called from every client's goroutine at once.
type Picker func() (instance int, db *sql.DB, done func())

// ClientOptions say who an EngineClient is and where its calls go.
type ClientOptions struct {
	ID   int
	Seed uint64 // of its random choices, with ID
	// Prefix starts its idempotency keys: unique among the clients of one
	// database. Tag, when not "", tags its calls.
	Prefix, Tag string
	Pick        Picker
	// Replay repeats every answered reserve and claim once more, through
	// a pick of its own (another instance, behind a balancer): the repeat
	// must answer what the first call did (the reserve replayed, with its
	// token; the claim a duplicate), whichever version answers it.
	Replay bool
}

// EngineClient is one checkout client: it places orders one after another
// (reserve, then claim, release or abandon; each call repeated on a
// retryable answer within Options.RetryBudget), each call on the instance
// its Picker chooses. It belongs to one goroutine.
type EngineClient struct{ c *client }

// NewEngineClient is a client with o's items, TTL and budgets (o as a
// scenario's: DefaultOptions or ShortOptions, changed).
func NewEngineClient(o *Options, co ClientOptions) *EngineClient {
	return &EngineClient{c: &client{id: co.ID, o: o, rng: rand.New(rand.NewPCG(co.Seed, uint64(co.ID))), prefix: co.Prefix,
		tag: co.Tag, pick: co.Pick, replay: co.Replay}}
}

// Run places orders until ctx is done; the order under way finishes its
// retries.
func (e *EngineClient) Run(ctx context.Context) { e.c.run(ctx) }

// Journal is every call the client made, once Run has returned.
func (e *EngineClient) Journal() []Call { return e.c.journal }

// Answer is the call's answer as a report counts it: "ok", an outcome,
// an error code, or how it was lost.
func (c *Call) Answer() string { return c.answerLabel() }

// Stock creates o's items through holdfast's CALL holdfast.receive on db
// (a pool of client connections to one instance).
func Stock(ctx context.Context, o *Options, db *sql.DB) error { return stock(ctx, o, db) }

// ReadLedger is on_hand per pool of the harness's shop, read from db
// (holdfast's tables, as an administrator).
func ReadLedger(ctx context.Context, db *sql.DB) (map[PoolKey]int64, error) {
	return readLedger(ctx, db)
}

// Verdict is what Judge found.
type Verdict struct {
	Violations []Violation
	// Units: on_hand summed over every pool before and after, and the
	// quantity of every claimed reservation.
	InitialUnits, FinalUnits, ClaimedUnits int64
	// Unknown is how many calls' outcomes were unknown to their clients
	// (resolved against the database).
	Unknown int
}

// Judge judges calls, the journal of EngineClients, against the
// database db (holdfast's tables, as an administrator): every answer
// true, each success exactly once, errors only of the codes a true answer
// may carry, no client connection lost (no holdfast was killed), and
// every unit that left on_hand claimed (initial is ReadLedger's before
// the traffic; ttl the reserves' ttl_seconds); then the stock invariant
// now.
func Judge(ctx context.Context, db *sql.DB, calls []Call, initial map[PoolKey]int64, ttl time.Duration) (Verdict, error) {
	f, err := readFacts(ctx, db, initial)
	if err != nil {
		return Verdict{}, err
	}
	v := judge(calls, f, false, false, ttl)
	out := Verdict{Violations: v.Violations}
	for _, u := range v.ClaimedUnits {
		out.ClaimedUnits += u
	}
	for _, u := range f.initial {
		out.InitialUnits += u
	}
	for _, u := range f.final {
		out.FinalUnits += u
	}
	for _, byKind := range v.Resolved {
		for _, r := range byKind {
			out.Unknown += r.Effect + r.None
		}
	}
	bad, err := CheckInvariant(ctx, db)
	out.Violations = append(out.Violations, bad...)
	return out, err
}

// CheckInvariant checks the stock invariant of every pool of the
// harness's shop now (reservation.CheckStock).
func CheckInvariant(ctx context.Context, db *sql.DB) ([]Violation, error) {
	bs, err := checkStock(ctx, db)
	var out []Violation
	for _, b := range bs {
		out = append(out, Violation{checkInvariant, b.at.Format("15:04:05") + ": " + b.detail})
	}
	return out, err
}

// WaitExpired waits, up to timeout, until no reserved line of the shop is
// left: the TTL has passed for all of them and a sweeper has expired
// them.
func WaitExpired(ctx context.Context, db *sql.DB, timeout time.Duration) error {
	return waitExpired(ctx, db, timeout)
}
