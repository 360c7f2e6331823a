// Package version is holdfast's build stamp: the version, commit and build
// date the Makefile writes into the binary at link time, and the Go
// version it was built with. It is the one source of the version string
// (holdfast version, the fleet's members table, holdfast_build_info);
// nothing else may read runtime/debug's build information for it.
package version

import (
	"runtime"
	"runtime/debug"
	"strings"
)

// Set at link time by scripts/ldflags.sh (make build, install, run, image):
//
//	-X github.com/holdfast-db/holdfast/internal/version.version=v1.2.0-3-gabc1234-dirty
//	-X github.com/holdfast-db/holdfast/internal/version.commit=<full hash>
//	-X github.com/holdfast-db/holdfast/internal/version.date=2026-12-06T13:02:11Z
//
// Empty: not stamped (a plain go build or go install); Get falls back to
// what the Go toolchain recorded.
var (
	version string
	commit  string
	date    string
)

// Unknown stands for a field neither the link nor the toolchain recorded.
const Unknown = "unknown"

// Info is a build's stamp. No field is empty: what is not known is
// Unknown.
type Info struct {
	Version   string // git describe --tags --always --dirty, or the module version
	Commit    string // the full commit hash
	Date      string // when it was built (RFC 3339, UTC), or the commit's time
	GoVersion string // runtime.Version()
}

// Get returns this binary's stamp. A binary the Makefile built reports
// what it stamped. Otherwise: a go install of a tagged module reports its
// module version; a go build in a git checkout (with -buildvcs) its
// pseudo-version, revision and commit time; a build with neither reports
// version "devel", never Go's "(devel)".
func Get() Info {
	return resolve(version, commit, date, readBuildInfo())
}

func readBuildInfo() *debug.BuildInfo {
	bi, _ := debug.ReadBuildInfo()
	return bi
}

// resolve is Get with its inputs given: the link-time stamps and the
// toolchain's build information (nil: none).
func resolve(version, commit, date string, bi *debug.BuildInfo) Info {
	var modVersion, revision, vcsTime string
	modified := false
	if bi != nil {
		if v := bi.Main.Version; v != "" && v != "(devel)" {
			modVersion = v
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				revision = s.Value
			case "vcs.time":
				vcsTime = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
	}
	in := Info{Version: version, Commit: commit, Date: date, GoVersion: runtime.Version()}
	if in.Version == "" {
		in.Version = modVersion
	}
	if in.Version == "" && revision != "" {
		in.Version = revision[:min(len(revision), 12)]
		if modified {
			in.Version += "-dirty"
		}
	}
	if in.Version == "" {
		in.Version = "devel"
	}
	if in.Commit == "" {
		in.Commit = revision
	}
	if in.Date == "" {
		in.Date = vcsTime
	}
	for _, f := range []*string{&in.Commit, &in.Date} {
		if *f = strings.TrimSpace(*f); *f == "" {
			*f = Unknown
		}
	}
	return in
}

// String is the one-line form: "v1.2.0 (commit abc1234, built DATE, go1.26.8)".
func (i Info) String() string {
	c := i.Commit
	if len(c) > 12 {
		c = c[:12]
	}
	return i.Version + " (commit " + c + ", built " + i.Date + ", " + i.GoVersion + ")"
}
