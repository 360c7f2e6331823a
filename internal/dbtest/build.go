package dbtest

import (
	"testing"

	"github.com/holdfast-db/holdfast/internal/holdfastproc"
)

// Command returns a binary of the holdfast module's command pkg
// ("./cmd/holdfast") as holdfastproc.Cached builds it: once per test
// process, kept between runs, one per checkout, whichever module of the
// checkout the test is in.
func Command(t testing.TB, pkg string) string {
	t.Helper()
	root, err := holdfastproc.RepoRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	bin, err := holdfastproc.Cached(root, pkg)
	if err != nil {
		t.Fatal(err)
	}
	return bin
}
