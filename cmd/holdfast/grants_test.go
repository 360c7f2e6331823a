package main

import (
	"strings"
	"testing"

	"github.com/holdfast-db/holdfast/config"
)

// The printed grants, in both dialects: holdfast's own account gets
// everything on fleet.database, the kill privilege, the topology checks'
// privilege (with or without replicas); application accounts get their database and
// nothing on holdfast's; the grants for tables not moved yet are
// commented out. Without fleet.user, they name a suggested account and
// say why.
func TestPrintGrants(t *testing.T) {
	cfg := config.Default()
	cfg.Backend.User, cfg.Backend.Database = "app", "shop"
	cfg.Fleet.User, cfg.Fleet.Database = "hf", "hf_tables"
	cfg.Users = append(cfg.Users, config.User{Name: "r", BackendUser: "reporting"}, config.User{Name: "s", BackendUser: "reporting"})
	cfg.Backend.Replicas = []config.Replica{{Address: "10.0.0.2:3306"}}
	for _, tc := range []struct {
		dialect string
		want    []string
	}{
		{"mariadb", []string{"GRANT CONNECTION ADMIN ON *.* TO 'hf'@'%';", "GRANT SLAVE MONITOR ON *.* TO 'hf'@'%';"}},
		{"mysql", []string{"GRANT CONNECTION_ADMIN ON *.* TO 'hf'@'%';", "GRANT REPLICATION CLIENT ON *.* TO 'hf'@'%';"}},
	} {
		var b strings.Builder
		if err := printGrants(&b, cfg, tc.dialect); err != nil {
			t.Fatal(err)
		}
		out := b.String()
		want := append([]string{
			"GRANT ALL PRIVILEGES ON `hf_tables`.* TO 'hf'@'%';",
			"GRANT SELECT, INSERT, UPDATE, DELETE ON `shop`.* TO 'app'@'%';",
			"GRANT SELECT, INSERT, UPDATE, DELETE ON `shop`.* TO 'reporting'@'%';",
			"--   GRANT SELECT ON `hf_tables`.* TO 'app'@'%';",
			"-- GRANT SELECT, INSERT, UPDATE, DELETE, ALTER, DROP ON `shop`.`holdfast_controls` TO 'hf'@'%';",
		}, tc.want...)
		for _, w := range want {
			if !strings.Contains(out, w+"\n") {
				t.Errorf("%s: no line %q in:\n%s", tc.dialect, w, out)
			}
		}
		var grants []string
		for _, l := range strings.Split(out, "\n") {
			if strings.HasPrefix(l, "GRANT") {
				grants = append(grants, l)
				if strings.Contains(l, "hf_tables") && !strings.Contains(l, "'hf'@") {
					t.Errorf("%s: an application account gets a grant on holdfast's schema: %s", tc.dialect, l)
				}
			}
		}
		if len(grants) != 5 {
			t.Errorf("%s: %d grants, want 5 (3 for holdfast's account, 1 for each of 2 application accounts):\n%s", tc.dialect, len(grants), out)
		}
	}
	if err := printGrants(&strings.Builder{}, cfg, "oracle"); err == nil {
		t.Error("an unknown dialect was accepted")
	}

	cfg.Fleet.User, cfg.Backend.Replicas = "", nil
	var b strings.Builder
	if err := printGrants(&b, cfg, "mariadb"); err != nil {
		t.Fatal(err)
	}
	if out := b.String(); !strings.Contains(out, "fleet.user is empty") || !strings.Contains(out, "TO '"+suggestedFleetUser+"'@'%';") ||
		!strings.Contains(out, "GRANT SLAVE MONITOR ON *.* TO '"+suggestedFleetUser+"'@'%';") {
		t.Errorf("without fleet.user or replicas:\n%s", out)
	}
}
