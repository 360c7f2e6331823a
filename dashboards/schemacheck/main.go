// Command schemacheck validates Grafana dashboard JSON files against
// Grafana's dashboard schema, as published in the Grafana Foundation SDK
// (github.com/grafana/grafana-foundation-sdk/go, types generated from the
// schemas Grafana itself ships): strict decoding rejects unknown fields,
// wrong types and missing required fields, panel options and field config
// are decoded with each panel plugin's own schema, and targets with the
// data source's query schema; then the schema's constraints are checked.
//
// It is its own module so that holdfast's go.mod does not carry the SDK;
// dashboards_test.go runs it with `go run`. Usage: schemacheck FILE...
package main

import (
	"fmt"
	"os"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/cog/plugins"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: schemacheck FILE...")
		os.Exit(2)
	}
	plugins.RegisterDefaultPlugins()
	failed := false
	for _, name := range os.Args[1:] {
		if err := check(name); err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
			failed = true
			continue
		}
		fmt.Printf("%s: valid against the Grafana dashboard schema\n", name)
	}
	if failed {
		os.Exit(1)
	}
}

func check(name string) error {
	raw, err := os.ReadFile(name)
	if err != nil {
		return err
	}
	var d dashboard.Dashboard
	if err := orNil(d.UnmarshalJSONStrict(raw)); err != nil {
		return fmt.Errorf("strict decode:\n%w", err)
	}
	if err := orNil(d.Validate()); err != nil {
		return fmt.Errorf("constraints:\n%w", err)
	}
	return nil
}

// orNil turns the SDK's empty error list, which its strict decoders return
// as a non-nil error when there was nothing wrong, into nil.
func orNil(err error) error {
	if errs, ok := err.(cog.BuildErrors); ok && len(errs) == 0 {
		return nil
	}
	return err
}
