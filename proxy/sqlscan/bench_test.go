package sqlscan

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

// Statements for benchmarks.
var (
	pointSelect = []byte("SELECT id, name, price, stock FROM products WHERE shop_id = 42 AND id = 1001 /* conn_tag:pdp */")
	insert2K    = bulkInsert(2 << 10)
	insert1M    = bulkInsert(1 << 20)
)

// bulkInsert returns a multi-row INSERT of about n bytes.
func bulkInsert(n int) []byte {
	var b strings.Builder
	b.WriteString("INSERT INTO reserved_quantities (shop_id, idempotency_key, qty, note, expires_at) VALUES ")
	for i := 0; b.Len() < n; i++ {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("(42, 'key-" + strconv.Itoa(i) + "', " + strconv.Itoa(i%7) + ", 'it''s a \\'note\\'', NOW() + INTERVAL 600 SECOND)")
	}
	return []byte(b.String())
}

var sink int

// baseline returns the ns per pass of the cheapest possible lexer loop over
// sql, one table lookup per byte, measured now on this machine.
func baseline(sql []byte) float64 {
	n, start := 0, time.Now()
	for time.Since(start) < 20*time.Millisecond {
		for range 16 {
			s := 0
			for _, c := range sql {
				s += int(class[c])
			}
			sink += s
			n++
		}
	}
	return float64(time.Since(start).Nanoseconds()) / float64(n)
}

// BenchmarkScan reports ns/op, allocs and "x-baseline", the time relative
// to one table-lookup pass over the same bytes measured in the same run.
func BenchmarkScan(b *testing.B) {
	for _, bc := range []struct {
		name string
		sql  []byte
	}{
		{"PointSelect100B", pointSelect},
		{"Insert2KiB", insert2K},
		{"Insert1MiB", insert1M},
	} {
		b.Run(bc.name, func(b *testing.B) {
			base := baseline(bc.sql)
			b.SetBytes(int64(len(bc.sql)))
			b.ReportAllocs()
			for b.Loop() {
				sink += int(Scan(bc.sql).Kind)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/base, "x-baseline")
		})
	}
}

func BenchmarkAppendDigest(b *testing.B) {
	for _, bc := range []struct {
		name string
		sql  []byte
	}{
		{"PointSelect100B", pointSelect},
		{"Insert2KiB", insert2K},
	} {
		b.Run(bc.name, func(b *testing.B) {
			dst := make([]byte, 0, 1024)
			b.SetBytes(int64(len(bc.sql)))
			b.ReportAllocs()
			for b.Loop() {
				dst = AppendDigest(dst[:0], bc.sql, 1024)
			}
		})
	}
}

func BenchmarkParseCall(b *testing.B) {
	sql := []byte("CALL holdfast.reserve(1, 'key-1', '[{\"item\":1,\"qty\":2}]', 600)")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseCall(sql); err != nil {
			b.Fatal(err)
		}
	}
}
