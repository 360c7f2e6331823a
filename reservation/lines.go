package reservation

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
)

// reqLine is one line of a reserve: a quantity of one item from the first
// of its candidate locations that can supply all of it.
type reqLine struct {
	item      int64
	qty       int64
	locations []int64 // candidate inventory_group_ids, in order of preference
}

// reserveReq is a decoded, validated reserve call.
type reserveReq struct {
	shop   int64
	key    string
	lines  []reqLine
	ttlArg int64 // ttl_seconds as given; 0 for NULL
	ttl    time.Duration
	hash   [32]byte // identifies the request, for replays
	// ids are the reservation_ids this call has tried, the current one
	// last: one per call, replaced only when it collided with another
	// reservation's. They tell the call's own reservation from a replay.
	ids []uint64
	// authority is recorded with the reservation (CallOptions.Authority).
	authority Authority
}

// apply takes a reserve's CallOptions: a chosen reservation id, the
// authority to record, locations pinned per line (after the hash, which
// stays the request's own).
func (r *reserveReq) apply(o *CallOptions) error {
	if o == nil {
		return nil
	}
	if o.ReservationID != 0 {
		if o.ReservationID >= 1<<63 {
			return fmt.Errorf("reservation: CallOptions.ReservationID %d is not a reservation id", o.ReservationID)
		}
		r.ids = []uint64{o.ReservationID}
	}
	r.authority = o.Authority
	if o.Locations != nil {
		if len(o.Locations) != len(r.lines) {
			return fmt.Errorf("reservation: CallOptions.Locations has %d locations for %d lines", len(o.Locations), len(r.lines))
		}
		for i, g := range o.Locations {
			if !slices.Contains(r.lines[i].locations, g) {
				return fmt.Errorf("reservation: CallOptions.Locations: location %d is not one of line %d's", g, i+1)
			}
			r.lines[i].locations = []int64{g}
		}
	}
	return nil
}

// id is the reservation_id the call's next attempt inserts.
func (r *reserveReq) id() uint64 { return r.ids[len(r.ids)-1] }

// mine reports whether reservation id was made by this call.
func (r *reserveReq) mine(id uint64) bool { return slices.Contains(r.ids, id) }

// maxLinesJSON bounds the lines_json argument before it is decoded.
const maxLinesJSON = 4 << 20

// lineLimits bound what parseLines accepts.
type lineLimits struct {
	MaxLines, MaxLocations int
	MaxQty                 int64
}

// jsonLine is the wire shape of one line:
//
//	{"item": 1001, "qty": 2, "locations": [3, 1]}
//
// Fields are kept raw so each gets its own error message.
type jsonLine struct {
	Item      json.RawMessage `json:"item"`
	Qty       json.RawMessage `json:"qty"`
	Locations json.RawMessage `json:"locations"`
}

// parseLines decodes and validates reserve's lines_json. The error text says
// which line and field is wrong and why; it is meant for the client.
func parseLines(s string, lim lineLimits) ([]reqLine, error) {
	if len(s) > maxLinesJSON {
		return nil, fmt.Errorf("is %d bytes; at most %d are allowed", len(s), maxLinesJSON)
	}
	if out, ok := parseLinesFast(s, lim); ok {
		return out, nil
	}
	return parseLinesJSON(s, lim)
}

// parseLinesFast is parseLines for lines as clients write them: an array of
// objects with exactly the keys "item", "qty" and "locations", each once,
// in any order, holding integers written as plain digits, with JSON
// whitespace between tokens, every line valid within lim. It reports false
// for anything else, valid JSON or not, and parseLinesJSON then decodes it
// and words the error. It accepts nothing parseLinesJSON would refuse and
// returns what parseLinesJSON would (FuzzParseLines checks both). A reserve
// spends most of its parsing here rather than in encoding/json's reflection.
func parseLinesFast(s string, lim lineLimits) ([]reqLine, bool) {
	p := fastJSON{s: s}
	if !p.next('[') {
		return nil, false
	}
	var out []reqLine
	for {
		l, ok := p.line(lim)
		if !ok || len(out) == lim.MaxLines || slices.ContainsFunc(out, func(o reqLine) bool { return o.item == l.item }) {
			return nil, false
		}
		out = append(out, l)
		if p.next(']') {
			break
		}
		if !p.next(',') {
			return nil, false
		}
	}
	p.space()
	return out, p.i == len(s)
}

// fastJSON is parseLinesFast's cursor.
type fastJSON struct {
	s string
	i int
}

func (p *fastJSON) space() {
	for p.i < len(p.s) && (p.s[p.i] == ' ' || p.s[p.i] == '\t' || p.s[p.i] == '\n' || p.s[p.i] == '\r') {
		p.i++
	}
}

// next consumes c, after whitespace, if it is there.
func (p *fastJSON) next(c byte) bool {
	p.space()
	if p.i < len(p.s) && p.s[p.i] == c {
		p.i++
		return true
	}
	return false
}

// positive reads an integer of 1 to 18 digits without a leading zero, so
// at least 1 and never overflowing.
func (p *fastJSON) positive() (int64, bool) {
	p.space()
	var v int64
	n := 0
	for p.i < len(p.s) && p.s[p.i] >= '0' && p.s[p.i] <= '9' && n < 19 {
		if n == 0 && p.s[p.i] == '0' {
			return 0, false
		}
		v = v*10 + int64(p.s[p.i]-'0')
		p.i++
		n++
	}
	return v, n > 0 && n <= 18
}

// line reads one {"item": .., "qty": .., "locations": [..]} object.
func (p *fastJSON) line(lim lineLimits) (reqLine, bool) {
	var l reqLine
	if !p.next('{') {
		return l, false
	}
	var seen [3]bool
	for k := 0; k < 3; k++ {
		if k > 0 && !p.next(',') {
			return l, false
		}
		if !p.next('"') {
			return l, false
		}
		end := strings.IndexByte(p.s[p.i:], '"')
		if end < 0 {
			return l, false
		}
		key := p.s[p.i : p.i+end]
		p.i += end + 1
		if !p.next(':') {
			return l, false
		}
		var ok bool
		switch key {
		case "item":
			l.item, ok = p.positive()
			ok = ok && !seen[0]
			seen[0] = true
		case "qty":
			l.qty, ok = p.positive()
			ok = ok && !seen[1] && l.qty <= lim.MaxQty
			seen[1] = true
		case "locations":
			ok = !seen[2] && p.next('[')
			seen[2] = true
			for ok {
				var g int64
				if g, ok = p.positive(); !ok || slices.Contains(l.locations, g) || len(l.locations) == lim.MaxLocations {
					return l, false
				}
				l.locations = append(l.locations, g)
				if p.next(']') {
					break
				}
				ok = p.next(',')
			}
		}
		if !ok {
			return l, false
		}
	}
	return l, p.next('}')
}

// parseLinesJSON is parseLines with encoding/json, for any input.
func parseLinesJSON(s string, lim lineLimits) ([]reqLine, error) {
	dec := json.NewDecoder(strings.NewReader(s))
	dec.DisallowUnknownFields()
	var raw []*jsonLine
	if err := dec.Decode(&raw); err != nil {
		return nil, fmt.Errorf("is not a JSON array of lines like [{\"item\":1001,\"qty\":1,\"locations\":[1,2]}]: %s", jsonErrText(err))
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("has data after the JSON array")
	}
	if raw == nil {
		return nil, errors.New("must be a JSON array of lines, got null")
	}
	if len(raw) == 0 {
		return nil, errors.New("must list at least one line")
	}
	if len(raw) > lim.MaxLines {
		return nil, fmt.Errorf("has %d lines; at most %d are allowed", len(raw), lim.MaxLines)
	}
	out := make([]reqLine, len(raw))
	firstLine := make(map[int64]int, len(raw))
	for i, r := range raw {
		n := i + 1
		if r == nil {
			return nil, fmt.Errorf("line %d: must be an object, got null", n)
		}
		if r.Item == nil {
			return nil, fmt.Errorf("line %d: missing \"item\"", n)
		}
		item, ok := positiveNumber(r.Item)
		if !ok {
			return nil, fmt.Errorf("line %d: \"item\" must be a positive integer, got %s", n, shortJSON(r.Item))
		}
		if prev, dup := firstLine[item]; dup {
			return nil, fmt.Errorf("line %d: item %d is already on line %d (put the whole quantity on one line)", n, item, prev)
		}
		firstLine[item] = n
		if r.Qty == nil {
			return nil, fmt.Errorf("line %d: missing \"qty\"", n)
		}
		qty, ok := positiveNumber(r.Qty)
		if !ok {
			return nil, fmt.Errorf("line %d: \"qty\" must be a positive integer, got %s", n, shortJSON(r.Qty))
		}
		if qty > lim.MaxQty {
			return nil, fmt.Errorf("line %d: \"qty\" %d exceeds the pool cap %d", n, qty, lim.MaxQty)
		}
		var locsRaw []json.RawMessage
		if r.Locations == nil || json.Unmarshal(r.Locations, &locsRaw) != nil {
			return nil, fmt.Errorf("line %d: \"locations\" must be an array of inventory_group_ids, got %s", n, shortJSON(r.Locations))
		}
		if len(locsRaw) == 0 {
			return nil, fmt.Errorf("line %d: \"locations\" must list at least one inventory_group_id", n)
		}
		if len(locsRaw) > lim.MaxLocations {
			return nil, fmt.Errorf("line %d: %d locations; at most %d are allowed", n, len(locsRaw), lim.MaxLocations)
		}
		locs := make([]int64, len(locsRaw))
		for j, l := range locsRaw {
			g, ok := positiveNumber(l)
			if !ok {
				return nil, fmt.Errorf("line %d: location %d must be a positive integer, got %s", n, j+1, shortJSON(l))
			}
			for _, prev := range locs[:j] {
				if prev == g {
					return nil, fmt.Errorf("line %d: location %d is listed twice", n, g)
				}
			}
			locs[j] = g
		}
		out[i] = reqLine{item: item, qty: qty, locations: locs}
	}
	return out, nil
}

// positiveNumber accepts a JSON number literal holding an integer >= 1
// (not a string, not 1.0, not 1e3).
func positiveNumber(raw json.RawMessage) (int64, bool) {
	v, err := strconv.ParseInt(string(bytes.TrimSpace(raw)), 10, 64)
	return v, err == nil && v > 0
}

func shortJSON(raw json.RawMessage) string {
	if raw == nil {
		return "nothing"
	}
	s := string(bytes.TrimSpace(raw))
	if len(s) > 40 {
		s = s[:40] + "..."
	}
	return s
}

func jsonErrText(err error) string {
	var ute *json.UnmarshalTypeError
	if errors.As(err, &ute) {
		want := "a value of another type"
		switch ute.Type.Kind() {
		case reflect.Slice:
			want = "an array"
		case reflect.Struct, reflect.Pointer:
			want = "an object"
		}
		return fmt.Sprintf("found a JSON %s where %s was expected", ute.Value, want)
	}
	return strings.TrimPrefix(err.Error(), "json: ")
}

// requestHash identifies a reserve request for idempotency: the same key
// with a different hash is a conflict.
func requestHash(shop, ttlArg int64, lines []reqLine) [32]byte {
	var b bytes.Buffer
	var n [8]byte
	put := func(v int64) {
		binary.BigEndian.PutUint64(n[:], uint64(v))
		b.Write(n[:])
	}
	b.WriteString("holdfast.reserve/v1")
	put(shop)
	put(ttlArg)
	put(int64(len(lines)))
	for _, l := range lines {
		put(l.item)
		put(l.qty)
		put(int64(len(l.locations)))
		for _, g := range l.locations {
			put(g)
		}
	}
	return sha256.Sum256(b.Bytes())
}

// heldLine is one line as reserved: the location chosen for it.
type heldLine struct {
	item, group, qty int64
}

// encodeLines is the reservations.lines column: "item,group,qty;..." in line order.
func encodeLines(ls []heldLine) []byte {
	var b []byte
	for i, l := range ls {
		if i > 0 {
			b = append(b, ';')
		}
		b = strconv.AppendInt(b, l.item, 10)
		b = append(b, ',')
		b = strconv.AppendInt(b, l.group, 10)
		b = append(b, ',')
		b = strconv.AppendInt(b, l.qty, 10)
	}
	return b
}

func decodeLines(b []byte) ([]heldLine, error) {
	var out []heldLine
	for _, part := range strings.Split(string(b), ";") {
		f := strings.Split(part, ",")
		if len(f) != 3 {
			return nil, fmt.Errorf("reservation: corrupt lines column %q", b)
		}
		var v [3]int64
		for i := range f {
			x, err := strconv.ParseInt(f[i], 10, 64)
			if err != nil {
				return nil, fmt.Errorf("reservation: corrupt lines column %q", b)
			}
			v[i] = x
		}
		out = append(out, heldLine{item: v[0], group: v[1], qty: v[2]})
	}
	return out, nil
}
