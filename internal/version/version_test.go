package version

import (
	"runtime"
	"runtime/debug"
	"testing"
)

func TestResolve(t *testing.T) {
	vcs := func(kv ...string) []debug.BuildSetting {
		var s []debug.BuildSetting
		for i := 0; i+1 < len(kv); i += 2 {
			s = append(s, debug.BuildSetting{Key: kv[i], Value: kv[i+1]})
		}
		return s
	}
	const rev = "f22f59fd0123456789abcdef0123456789abcdef"
	for _, tc := range []struct {
		name                  string
		version, commit, date string
		bi                    *debug.BuildInfo
		want                  Info
	}{
		{"stamped by the Makefile", "f22f59f-dirty", rev, "2026-12-06T13:02:11Z",
			&debug.BuildInfo{Main: debug.Module{Version: "(devel)"}},
			Info{"f22f59f-dirty", rev, "2026-12-06T13:02:11Z", runtime.Version()}},
		{"stamped, the toolchain's ignored", "v1.2.0", rev, "2026-12-06T13:02:11Z",
			&debug.BuildInfo{Main: debug.Module{Version: "v0.0.0-20261206130211-f22f59fd0123"}, Settings: vcs("vcs.revision", "other")},
			Info{"v1.2.0", rev, "2026-12-06T13:02:11Z", runtime.Version()}},
		{"go install module@v1.2.0", "", "", "",
			&debug.BuildInfo{Main: debug.Module{Version: "v1.2.0"}},
			Info{"v1.2.0", Unknown, Unknown, runtime.Version()}},
		{"go build with VCS information", "", "", "",
			&debug.BuildInfo{Main: debug.Module{Version: "v0.0.0-20261206130211-f22f59fd0123+dirty"},
				Settings: vcs("vcs.revision", rev, "vcs.time", "2026-12-06T13:02:11Z", "vcs.modified", "true")},
			Info{"v0.0.0-20261206130211-f22f59fd0123+dirty", rev, "2026-12-06T13:02:11Z", runtime.Version()}},
		{"VCS information without a module version", "", "", "",
			&debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: vcs("vcs.revision", rev, "vcs.modified", "true")},
			Info{"f22f59fd0123-dirty", rev, Unknown, runtime.Version()}},
		{"no VCS information: never (devel)", "", "", "",
			&debug.BuildInfo{Main: debug.Module{Version: "(devel)"}},
			Info{"devel", Unknown, Unknown, runtime.Version()}},
		{"no build information", "", "", "", nil,
			Info{"devel", Unknown, Unknown, runtime.Version()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := resolve(tc.version, tc.commit, tc.date, tc.bi); got != tc.want {
				t.Errorf("resolve = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestString(t *testing.T) {
	i := Info{"v1.2.0", "f22f59fd0123456789", "2026-12-06T13:02:11Z", "go1.26.8"}
	if got, want := i.String(), "v1.2.0 (commit f22f59fd0123, built 2026-12-06T13:02:11Z, go1.26.8)"; got != want {
		t.Errorf("String = %q, want %q", got, want)
	}
}
