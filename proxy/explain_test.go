package proxy

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/holdfast-db/holdfast/config"
	"github.com/holdfast-db/holdfast/internal/rawmysql"
)

// Explain shows the plan the statement path would make: where a statement
// goes and why, the controls it meets, the refusal it would get. It runs
// nothing and counts no tag.
func TestExplain(t *testing.T) {
	p := startProxy(t, func(c *config.Config) {
		c.Users = append(c.Users, config.User{Name: "bounded", Password: "bounded", Tags: []string{"checkout*"}, RefuseOtherTags: true},
			config.User{Name: "defaulted", Password: "defaulted", DefaultTag: "web"})
	})
	p.srv.ProtectTables(p.db, holdfastTables)
	p.srv.DrainTag("batch", "INC-7", 0)
	p.srv.LimitTag("report", 2)
	if err := p.srv.SetControl("pause", "maint*", 0, "switchover", "test"); err != nil {
		t.Fatal(err)
	}
	if err := p.srv.SetTagClass("report", "background"); err != nil {
		t.Fatal(err)
	}
	// The backend's defaults are learned at the first login.
	c := p.raw(t, rawmysql.Options{})
	c.value("SELECT 1")

	for _, tc := range []struct {
		user, tag, sql string
		check          func(e Explanation) bool
	}{
		{"app", "", "SELECT a FROM t WHERE id = 1 /* conn_tag:fast */", func(e Explanation) bool {
			return e.Action == "run" && e.Backend == "pipe" && e.Tag == "fast" && e.TagFrom == "statement" && e.Class == "normal" && e.Kind == "select"
		}},
		{"app", "batch", "SELECT 1", func(e Explanation) bool {
			return e.Action == "run" && e.Backend == "primary" && e.Key == "batch" && slices.ContainsFunc(e.Controls, func(s string) bool { return strings.Contains(s, "drained") })
		}},
		{"app", "report", "SELECT 1", func(e Explanation) bool {
			return e.Backend == "primary" && e.Class == "background" &&
				slices.ContainsFunc(e.Controls, func(s string) bool { return strings.Contains(s, "limited to 2") })
		}},
		{"app", "", "DELETE FROM " + p.db + ".reservation_units", func(e Explanation) bool {
			return e.Action == "refuse" && e.Refusal != nil && e.Refusal.Code == codeProtected
		}},
		{"app", "", "BEGIN", func(e Explanation) bool { return e.Action == "defer BEGIN" }},
		{"app", "maint_job", "UPDATE t SET a = 1", func(e Explanation) bool {
			return e.Action == "run" && slices.ContainsFunc(e.Controls, func(s string) bool {
				return strings.Contains(s, "tag 'maint_job' is paused by on-call under maint* (switchover)") && strings.Contains(s, "error 9010")
			})
		}},
		{"app", "", "SELECT @@wait_timeout", func(e Explanation) bool {
			return e.Backend == "primary" && slices.ContainsFunc(e.Steps, func(s string) bool { return strings.Contains(s, "kept variables") })
		}},
		{"app", "", "SELECT LAST_INSERT_ID()", func(e Explanation) bool { return e.Action == "answer locally" }},
		{"app", "", "KILL 5", func(e Explanation) bool { return e.Action == "kill" }},
		{"app", "", "SET @a = 1", func(e Explanation) bool { return e.Pin == "user_variable" && e.Backend == "primary" }},
		{"app", "", "SELECT 1", func(e Explanation) bool { return e.Tag == "untagged" && e.TagFrom == "untagged" }},
		{"defaulted", "", "SELECT 1", func(e Explanation) bool { return e.Tag == "web" && e.TagFrom == "default_tag" }},
		{"bounded", "other_flow", "SELECT 1", func(e Explanation) bool {
			return e.Action == "refuse" && e.Refusal != nil && e.Refusal.Code == codeTagRefused
		}},
		{"bounded", "checkout_x", "SELECT 1", func(e Explanation) bool { return e.Action == "run" && e.Tag == "checkout_x" }},
	} {
		e, err := p.srv.Explain(tc.user, tc.tag, tc.sql)
		if err != nil {
			t.Fatalf("%s: %v", tc.sql, err)
		}
		if !tc.check(e) {
			t.Errorf("explain %q as %s, tag %q:\n%+v", tc.sql, tc.user, tc.tag, e)
		}
	}
	if _, err := p.srv.Explain("app", "", " "); err == nil {
		t.Error("an empty statement explained")
	}
	for _, ti := range p.srv.Tags() {
		if ti.Tag == "fast" || ti.Tag == "checkout_x" {
			t.Errorf("explain counted tag %s", ti.Tag)
		}
	}
}

type refusal struct{}

func (refusal) Error() string { return "controls: tag t is read-only" }
func (refusal) MySQLError() (uint16, string, string) {
	return 9011, "25006", "holdfast: tag t is read-only"
}

// A statement-level control's refusal reaches the client with the code,
// SQLSTATE and text it carries.
func TestControlErr(t *testing.T) {
	e := controlErr(fmt.Errorf("refused: %w", refusal{}))
	if e.Code != 9011 || e.State != "25006" || e.Msg != "holdfast: tag t is read-only" {
		t.Fatalf("controlErr = %+v", e)
	}
	if e := controlErr(errors.New("x")); e.Code != codeUnknownError {
		t.Fatalf("a plain error: %+v", e)
	}
}
