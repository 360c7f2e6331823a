package bench

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/holdfast-db/holdfast/internal/dbtest"
)

// Workload (d): CALL holdfast.reserve in shadow mode. A second holdfast,
// built from the same binary, on the same database through the same relay,
// has reservation.redis pointing at a redis-server the harness starts on a
// free port without persistence, with authority redis: each reserve is
// decided by a Lua script on Redis, then run by the engine in shadow. Its
// runs are checked like (c)'s, on the MySQL tables.

// setupShadow starts the redis-server and the second holdfast; hc is the
// first one's configuration.
func (b *reserveRunner) setupShadow(ctx context.Context, hc HoldfastConfig) error {
	redisAddr, err := dbtest.ListenAddr()
	if err != nil {
		return err
	}
	_, port, _ := net.SplitHostPort(redisAddr)
	bin, err := exec.LookPath(b.o.RedisServer)
	if err != nil {
		return fmt.Errorf("bench: workload d needs redis-server (apt-get install redis-server, or -workloads a,b,c): %w", err)
	}
	b.redis = exec.Command(bin, "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", b.dir, "--protected-mode", "no")
	logf, err := os.Create(filepath.Join(b.dir, "redis.log"))
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	defer logf.Close()
	b.redis.Stdout, b.redis.Stderr = logf, logf
	if err := b.redis.Start(); err != nil {
		return fmt.Errorf("bench: start redis-server: %w", err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if c, err := net.DialTimeout("tcp", redisAddr, time.Second); err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bench: redis-server on %s did not listen", redisAddr)
		}
	}
	if err := hc.freeListen(); err != nil {
		return err
	}
	hc.Redis = redisAddr
	b.shadow, err = b.startTarget(ctx, b.bin, "holdfast-shadow", "holdfast with Redis (workload d)", hc)
	return err
}

// shadowDigest summarises the shadow's comparisons and each side's mean
// reserve time over a run.
func shadowDigest(before, after map[string]float64) string {
	d := func(k string) float64 { return after[k] - before[k] }
	var agree, differ float64
	for k := range after {
		if !strings.HasPrefix(k, "holdfast_shadow_comparisons_total{") || !strings.Contains(k, `procedure="reserve"`) {
			continue
		}
		h, r := labelValue(k, "holdfast"), labelValue(k, "redis")
		if h == r {
			agree += d(k)
		} else {
			differ += d(k)
		}
	}
	out := fmt.Sprintf("; shadow: reserves compared %.0f, agreeing %.0f, differing %.0f", agree+differ, agree, differ)
	for _, side := range []string{"redis", "holdfast"} {
		base := `holdfast_shadow_duration_seconds_%s{procedure="reserve",side="` + side + `"}`
		if n := d(fmt.Sprintf(base, "count")); n > 0 {
			out += fmt.Sprintf(", mean %s %.2f ms", side, 1000*d(fmt.Sprintf(base, "sum"))/n)
		}
	}
	return out
}

func labelValue(series, name string) string {
	i := strings.Index(series, name+`="`)
	if i < 0 {
		return ""
	}
	rest := series[i+len(name)+2:]
	if j := strings.IndexByte(rest, '"'); j >= 0 {
		return rest[:j]
	}
	return ""
}

// PrintShadowCost writes, per client count, (d) against (c): what shadow
// mode costs in reservations/s and p99.
func PrintShadowCost(w io.Writer, sums []ReserveSummary, clients []int) {
	printAgainstCall(w, sums, clients, WorkloadShadow, "shadow cost")
}

// PrintVariantEffect writes, per client count, (e) against (c): what the
// variant (ReserveOptions.Variant) changes, measured in the same rounds.
func PrintVariantEffect(w io.Writer, sums []ReserveSummary, clients []int, variant string) {
	printAgainstCall(w, sums, clients, WorkloadVariant, "holdfast "+variant)
}

func printAgainstCall(w io.Writer, sums []ReserveSummary, clients []int, wl, what string) {
	for _, n := range clients {
		c, okC := findSummary(sums, WorkloadCall, n)
		x, okX := findSummary(sums, wl, n)
		if !okC || !okX || c.Rate <= 0 {
			continue
		}
		fmt.Fprintf(w, "%s at %s clients: (%s) %.1f reservations/s = %.2f× (c) %.1f; p99 %.2f ms vs %.2f ms\n",
			what, strconv.Itoa(n), wl, x.Rate, x.Rate/c.Rate, c.Rate, ms(x.P99), ms(c.P99))
	}
}
