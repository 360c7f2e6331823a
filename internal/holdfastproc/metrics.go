package holdfastproc

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Metrics is one scrape of /metrics: each series as the text format
// writes it (`name` or `name{label="value",...}`) and its value.
type Metrics map[string]float64

// ByLabel returns the series of metric name by the value of their label
// label.
func (m Metrics) ByLabel(name, label string) map[string]float64 {
	out := map[string]float64{}
	for series, v := range m {
		labels, ok := strings.CutPrefix(series, name+"{")
		if !ok {
			continue
		}
		for _, l := range strings.Split(strings.TrimSuffix(labels, "}"), ",") {
			if val, ok := strings.CutPrefix(l, label+`="`); ok {
				out[strings.TrimSuffix(val, `"`)] = v
			}
		}
	}
	return out
}

// scrapeTimeout bounds one scrape: a hang guard.
const scrapeTimeout = 2 * time.Second

// Scrape reads /metrics from the admin listener at admin (host:port).
func Scrape(ctx context.Context, admin string) (Metrics, error) {
	ctx, cancel := context.WithTimeout(ctx, scrapeTimeout)
	defer cancel()
	url := "http://" + admin + "/metrics"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, fmt.Errorf("holdfastproc: %w", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("holdfastproc: scrape %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("holdfastproc: scrape %s: %s", url, resp.Status)
	}
	return ParseMetrics(resp.Body)
}

// ParseMetrics reads a page of the Prometheus text format.
func ParseMetrics(r io.Reader) (Metrics, error) {
	out := Metrics{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		// The value follows the series; label values may hold spaces,
		// so the series ends at the closing brace when there is one.
		end := strings.LastIndexByte(line, '}') + 1
		if end == 0 {
			end = strings.IndexByte(line, ' ')
		}
		if end <= 0 || end >= len(line) {
			return nil, fmt.Errorf("holdfastproc: metric line %q", line)
		}
		f := strings.Fields(line[end:])
		if len(f) == 0 {
			return nil, fmt.Errorf("holdfastproc: metric line %q", line)
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			return nil, fmt.Errorf("holdfastproc: metric line %q: %w", line, err)
		}
		out[line[:end]] = v
	}
	return out, sc.Err()
}
