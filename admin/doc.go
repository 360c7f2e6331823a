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
//   - the guards: the bearer token (admin.token), and for every request the
//     Host check and for every state-changing one the Origin check that keep
//     a page from another site, or a DNS-rebinding host name, from using a
//     loopback listener that has no token;
//   - Collector, the proxy's front-end and pool metrics and the per-tag
//     metrics, read from the server at scrape time.
//
// It works on top of the Server interface only: the proxy's exported,
// concurrency-safe snapshot methods and its on-call controls. It must not
// reach into the data path, and it changes nothing but through DrainTag,
// UndrainTag and LimitTag. Other components' health (the reservation
// engine's) is read from the Prometheus registry it is given, so it imports
// none of them. cmd/holdfast owns the registry and wires the rest.
package admin
