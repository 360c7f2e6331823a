// Package admin serves holdfast's admin listener (admin.listen): the JSON
// API that holdfastctl and scripts use (/api/...), Prometheus /metrics, Go
// profiles (/debug/pprof/, when enabled), and a status page for a person
// at / that refreshes itself.
//
// It owns:
//   - Admin, the HTTP handler and its lifecycle (New starts nothing; Serve
//     runs the listener and the sampler behind the status page's rates and
//     sparklines; Close is idempotent);
//   - the admin API's JSON contract (README.md, "Admin API"), with durations
//     rounded to the millisecond;
//   - who may do what (credentials.go, guard.go): named credentials of
//     scope read or write, a credential of scope write for every change,
//     on loopback too, and one for reads off loopback; the Host check for
//     requests without a credential and the Origin check for changes, that
//     keep a page from another site, or a DNS-rebinding host name, out;
//     the author recorded with a change (the credential's name, and the
//     caller's unverified "by"); the listener's TLS and its address, which
//     Reload replaces whole or not at all;
//   - the probe routes (probes.go), outside the guard: LivePath answers
//     whenever the listener does, ReadyPath what Options.Ready says;
//   - POST /api/reload (reload.go), which runs the Options.Reload it is
//     given behind a write credential and answers what it did;
//   - Collector, the proxy's front-end and pool metrics and the per-tag
//     metrics, read from the server at scrape time.
//
// It works on top of the Server interface only: the proxy's exported,
// concurrency-safe snapshot methods and its on-call controls. It must not
// reach into the data path, and it changes nothing but through the
// Server's controls and the Fleet, Authority and Reload it is given. Other components' health (the reservation
// engine's) is read from the Prometheus registry it is given, so it imports
// none of them. cmd/holdfast owns the registry and wires the rest.
package admin
