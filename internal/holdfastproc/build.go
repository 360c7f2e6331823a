package holdfastproc

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Module is the module path of the repository holdfast is built from.
const Module = "github.com/holdfast-db/holdfast"

// Build is one go build of a command of a holdfast checkout.
type Build struct {
	Go   string // the go command; "" is "go"
	Repo string // the checkout's root directory (where go.mod is)
	Pkg  string // the package; "" is ./cmd/holdfast
	Out  string // the binary to write
	Race bool   // build with the race detector
}

// Run runs the build and returns its command line, as a shell would run
// it from anywhere: "(cd REPO && go build -o OUT PKG)".
func (b Build) Run(ctx context.Context) (cmdline string, err error) {
	goCmd, pkg := b.Go, b.Pkg
	if goCmd == "" {
		goCmd = "go"
	}
	if pkg == "" {
		pkg = "./cmd/holdfast"
	}
	args := []string{"build", "-o", b.Out}
	if b.Race {
		args = append(args, "-race")
	}
	cmd := exec.CommandContext(ctx, goCmd, append(args, pkg)...)
	cmd.Dir = b.Repo
	cmdline = fmt.Sprintf("(cd %s && %s)", b.Repo, strings.Join(cmd.Args, " "))
	if out, err := cmd.CombinedOutput(); err != nil {
		return cmdline, fmt.Errorf("holdfastproc: %s: %w\n%s", cmdline, err, out)
	}
	return cmdline, nil
}

var (
	cachedMu sync.Mutex            // guards cached
	cached   = map[string]string{} // repo and package -> binary
)

// cacheTimeout bounds one cached build, and the wait for another
// process's: together within go test's default -timeout.
const cacheTimeout = 4 * time.Minute

// Cached returns a binary of the command pkg ("./cmd/holdfast") of the
// checkout at repo, built once per process into a directory kept between
// runs under the user's cache directory, one per checkout. go build relinks
// only when the sources changed, so the tests of every package share one
// link instead of paying one per test. Builds from concurrent processes
// are serialised by a file lock.
func Cached(repo, pkg string) (string, error) {
	cachedMu.Lock()
	defer cachedMu.Unlock()
	key := repo + "\x00" + pkg
	if bin, ok := cached[key]; ok {
		return bin, nil
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	sum := sha256.Sum256([]byte(repo))
	dir := filepath.Join(cache, "holdfast-test", hex.EncodeToString(sum[:8]))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("holdfastproc: %w", err)
	}
	lock, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", fmt.Errorf("holdfastproc: %w", err)
	}
	defer lock.Close()
	// Hang guards: a build takes at most cacheTimeout, so a lock held by
	// another process's build comes free within it.
	for deadline := time.Now().Add(cacheTimeout); ; {
		err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) || time.Now().After(deadline) {
			return "", fmt.Errorf("holdfastproc: lock %s: %w", lock.Name(), err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), cacheTimeout)
	defer cancel()
	bin := filepath.Join(dir, filepath.Base(pkg))
	if _, err := (Build{Repo: repo, Pkg: pkg, Out: bin}).Run(ctx); err != nil {
		return "", err
	}
	cached[key] = bin
	return bin, nil
}

// RepoRoot is the nearest directory at or above dir whose go.mod declares
// Module: the checkout dir is in, also from inside a nested module of it.
func RepoRoot(dir string) (string, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("holdfastproc: %w", err)
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && declares(b, Module) {
			return dir, nil
		}
		up := filepath.Dir(dir)
		if up == dir {
			return "", fmt.Errorf("holdfastproc: no go.mod of %s above the working directory", Module)
		}
		dir = up
	}
}

// declares reports whether the go.mod text gomod has the module line of
// module.
func declares(gomod []byte, module string) bool {
	for _, l := range bytes.Split(gomod, []byte("\n")) {
		f := strings.Fields(string(l))
		if len(f) == 2 && f[0] == "module" && strings.Trim(f[1], `"`) == module {
			return true
		}
	}
	return false
}
