// Package attribution attributes backend connection time to the business flow
// that spends it. It owns tag parsing (AppendCommentTag), the bounded set of tag names
// (Names), and the per-tag hold, wait and query-time accounting and Prometheus
// collectors built on them. It is pure: no I/O, no network, no SQL execution,
// no knowledge of the wire protocol or of the pool. It must not import proxy,
// reservation or refiller; they call it.
//
// # Tag forms
//
// A statement names its flow with the key conn_tag in a comment, anywhere in
// the statement:
//
//	SELECT 1 /* conn_tag:checkout_completion */
//	/*application:shop,conn_tag:checkout,controller:orders*/ SELECT 1
//	SELECT 1 /*conn_tag='checkout%20v2',traceparent='00-4bf9...-01'*/
//	SELECT 1 -- conn_tag:checkout
//	SELECT 1 # conn_tag:checkout
//
// A comment's text is read as words and key:value or key=value pairs,
// separated by commas or whitespace; whitespace around ':', '=' and ',' is
// allowed. The key is exactly conn_tag, case-sensitive: CONN_TAG and
// my_conn_tag are other keys. A value is either
//
//   - bare (marginalia): it runs to the next comma, whitespace or the end of
//     the comment, and is taken literally; or
//   - single-quoted (sqlcommenter): it runs to the next unescaped quote;
//     a backslash escapes the byte after it (\' is a quote), and the result
//     is then percent-decoded (%20 is a space; a '%' not followed by two hex
//     digits stays a '%'; '+' is not a space). A value whose closing quote is
//     missing is no tag.
//
// The first conn_tag key in the statement decides, even if its value turns
// out empty. A statement with no conn_tag key has no tag (Untagged).
//
// Which comments a statement has is the lexer's to say (holdfast's
// proxy/sqlscan, in the one pass that classifies the statement, under the
// session's sql_mode): text inside strings and identifiers, and outside
// comments, is never a tag, so SELECT '/* conn_tag:x */' has none, also
// under NO_BACKSLASH_ESCAPES and ANSI_QUOTES. Executable comments, /*! ...
// */ and MariaDB's /*M! ... */, are never tags (their text is SQL), nor are
// comments nested in them. Optimizer hints, /*+ ... */, are read like any
// other comment. An unterminated comment is not a tag. AppendCommentTag
// reads one comment's text; the statement's first comment holding a
// conn_tag key decides.
//
// # Sanitization
//
// After decoding, in this order:
//
//  1. Surrounding whitespace (space, \t, \n, \v, \f, \r) is trimmed. A value
//     that is empty after trimming is no tag: AppendCommentTag's ok is false.
//  2. A value beginning with "holdfast:" is reserved for holdfast's own work
//     (holdfast:reserve, holdfast:refill, ...); a client's is counted as if it
//     began with "holdfast_" instead, so clients cannot pose as holdfast.
//  3. Every byte outside [A-Za-z0-9_.:-] becomes '_': whitespace inside the
//     value, quotes, '/', '*', '%', control and NUL bytes, and each byte of a
//     UTF-8 or non-UTF-8 sequence. Tags are therefore printable ASCII, safe
//     as Prometheus label values.
//  4. The value is truncated to MaxTagLen bytes.
//
// A client tag spelled "untagged" or "other" shares the series of Untagged or
// Other.
//
// # Cardinality
//
// Metrics are labelled by tag, so the set of tag names with their own
// accounting is bounded: at most max names at a time. While every slot is
// taken, a new name is counted under Other, and each such fold is counted
// (Folded). With Options.RetireIdle set, a name whose accounting has not
// moved for that long gives up its slot when a new name needs one, least
// recently active first (Retired counts them): a retired flow, or a burst of
// junk tags, does not keep its slots until restart. A retired tag's series
// leave the metrics; if it comes back it starts from zero, which Prometheus
// reads as a counter reset. Recency is not tracked per lookup, which would
// put a lock or a shared write on every statement: a sweep, run at most
// every RetireIdle/4 (10 s at most) when a new name finds no slot, and every
// Snapshot, compares each tag's activity count with the last one it saw.
// Handles to a retired Tag stay valid: what they record goes to the name's
// current Tag (admitted again, or Other). holdfast's own tags (the reserved
// prefix) and Options.Known are never retired; Known names are admitted
// first so that they always have their own series.
//
// # Accounting
//
// A Recorder keeps one Tag per admitted name (Names semantics, MaxTags) and
// the proxy reports to it what happens to each backend connection it lends.
// A borrow runs from the moment a connection is lent to a tag to its return
// to the pool. Wait is the time the borrower spent waiting for it before it
// was lent; it is not part of the hold. Hold is the whole borrow: the
// connection is out of the pool and no one else can use it. Hold splits
// into exec, the time statements were running on it (sent to the backend
// until the end of the answer), idle in transaction, the time a transaction
// was open on it while holdfast waited for the client's next statement, and
// a rest that is neither: relay and round trips inside an autocommit
// borrow, and the idle time of a session pinned outside a transaction.
// Hold seconds per second is the number of connections a tag keeps busy, the
// figure the pool's size has to cover; a tag whose hold is mostly idle in
// transaction is a fast-SQL, slow-transaction flow.
//
// Counters and sums are atomics on the Tag, and histograms fixed buckets
// (Buckets, 100µs to 60s) of atomic counters, so recording takes no lock,
// does not allocate, and touches only the tag's own counters. NewCollector
// turns Recorder.Snapshot, and the proxy's live holders and gates, into
// holdfast_tag_* metrics at scrape time.
package attribution
