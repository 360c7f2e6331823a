// Package dashboards ships holdfast's Grafana dashboard (holdfast.json) and
// Prometheus alert rules (alerts.yml), embedded in Files so that tests and
// tools can read them from a build; README.md says what each panel and
// alert means and how to install them.
//
// The files are the product; this package only carries them. Its tests
// run the alert rules through promtool, validate the dashboard against
// Grafana's dashboard schema (the schemacheck module beside this file),
// and evaluate every PromQL expression of both files in a real Prometheus
// scraping a real holdfast under load. The package must not import the
// rest of holdfast: the metric names are its contract with holdfast.
package dashboards

import "embed"

// File names inside Files.
const (
	DashboardFile = "holdfast.json"
	AlertsFile    = "alerts.yml"
)

// Files holds DashboardFile and AlertsFile.
//
//go:embed holdfast.json alerts.yml
var Files embed.FS
