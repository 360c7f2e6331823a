package main

import (
	"fmt"
	"io"
	"runtime"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/holdfast-db/holdfast/internal/version"
)

// printVersion writes what `holdfast version` shows.
func printVersion(w io.Writer) {
	v := version.Get()
	fmt.Fprintf(w, "holdfast %s\n  commit  %s\n  built   %s\n  go      %s %s/%s\n",
		v.Version, v.Commit, v.Date, v.GoVersion, runtime.GOOS, runtime.GOARCH)
}

// buildVersion is this build's version as the fleet's members table
// records it (a VARCHAR(64) column): version.Get's, cut to fit.
func buildVersion() string {
	v := version.Get().Version
	return v[:min(len(v), 64)]
}

// processCollectors are the metrics about the process rather than its
// work: holdfast_build_info, and the Go runtime's (go_*) and the
// process's (process_*: memory, file descriptors, CPU) as every Go
// exporter serves them.
func processCollectors() []prometheus.Collector {
	v := version.Get()
	info := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "holdfast_build_info",
		Help:        "Always 1; its labels say which build of holdfast runs (holdfast version).",
		ConstLabels: prometheus.Labels{"version": v.Version, "commit": v.Commit, "goversion": v.GoVersion},
	})
	info.Set(1)
	return []prometheus.Collector{info, collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})}
}
