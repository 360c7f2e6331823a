package proxy

import (
	"os"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/holdfast-db/holdfast/internal/dbtest"
)

// TestLargeResultStreams relays a large result (96 MiB by default,
// HOLDFAST_STREAM_MB to change it) and rows larger than one 16 MiB packet,
// and checks that holdfast's memory does not grow with the result: results
// are relayed packet by packet, never gathered. 96 MiB is three times the
// growth the test allows, so a result gathered whole fails it.
func TestLargeResultStreams(t *testing.T) {
	if _, err := dbtest.Root(t).Exec("SET GLOBAL max_allowed_packet = 64*1024*1024"); err != nil {
		t.Fatal(err)
	}
	mb := 96
	if v, err := strconv.Atoi(os.Getenv("HOLDFAST_STREAM_MB")); err == nil && v > 0 {
		mb = v
	}
	p := startProxy(t)
	db := p.open(t, "maxAllowedPacket=0")

	var peak atomic.Uint64
	stop := make(chan struct{})
	done := make(chan struct{})
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapInuse
	go func() {
		defer close(done)
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > peak.Load() {
				peak.Store(ms.HeapInuse)
			}
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()

	rows, err := db.Query("SELECT seq, REPEAT('x', 1048576) FROM seq_1_to_" + strconv.Itoa(mb))
	if err != nil {
		t.Fatal(err)
	}
	n, total := 0, 0
	var v []byte
	var seq int
	for rows.Next() {
		if err := rows.Scan(&seq, &v); err != nil {
			t.Fatal(err)
		}
		n++
		total += len(v)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	rows.Close()
	streamPeak := int64(peak.Load()) - int64(base)

	// Rows over 16 MiB travel as several packets.
	var big []byte
	if err := db.QueryRow("SELECT REPEAT('y', 20*1024*1024 + 3)").Scan(&big); err != nil {
		t.Fatal(err)
	}
	close(stop)
	<-done
	if n != mb || total != mb<<20 || len(big) != 20<<20+3 {
		t.Fatalf("got %d rows, %d bytes, a %d-byte big row", n, total, len(big))
	}
	t.Logf("relayed %d MiB; peak heap growth %d MiB (client and server share this process)", mb, streamPeak>>20)
	// The client holds one 1 MiB row at a time; holdfast keeps only
	// fixed-size buffers. Buffering the result would grow the heap by
	// hundreds of MiB.
	if streamPeak > 32<<20 {
		t.Fatalf("heap grew by %d MiB while relaying %d MiB: results are being buffered", streamPeak>>20, mb)
	}
}
