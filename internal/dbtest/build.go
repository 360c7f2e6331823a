package dbtest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

var (
	buildMu sync.Mutex            // guards built
	built   = map[string]string{} // package path -> binary
)

// Command returns a binary of the module's command pkg ("./cmd/holdfast"),
// built once per test process into a directory kept between runs under
// the user's cache directory, one per checkout. go build relinks only when
// the sources changed, so the tests of every package share one link
// instead of paying one per test. Builds from concurrent test processes
// are serialised by a file lock.
func Command(t testing.TB, pkg string) string {
	t.Helper()
	buildMu.Lock()
	defer buildMu.Unlock()
	if bin, ok := built[pkg]; ok {
		return bin
	}
	bin, err := buildCommand(pkg)
	if err != nil {
		t.Fatal(err)
	}
	built[pkg] = bin
	return bin
}

// buildTimeout bounds one go build of a command, and the wait for another
// process's build: together within go test's default -timeout.
const buildTimeout = 4 * time.Minute

func buildCommand(pkg string) (string, error) {
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	sum := sha256.Sum256([]byte(root))
	dir := filepath.Join(cache, "holdfast-test", hex.EncodeToString(sum[:8]))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("dbtest: %w", err)
	}
	lock, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", fmt.Errorf("dbtest: %w", err)
	}
	defer lock.Close()
	// Hang guards: a build takes at most buildTimeout, so a lock held by
	// another test process's build comes free within it.
	for deadline := time.Now().Add(buildTimeout); ; {
		err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) || time.Now().After(deadline) {
			return "", fmt.Errorf("dbtest: lock %s: %w", lock.Name(), err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), buildTimeout)
	defer cancel()
	bin := filepath.Join(dir, filepath.Base(pkg))
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, pkg)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("dbtest: go build %s: %w\n%s", pkg, err, out)
	}
	return bin, nil
}

// moduleRoot is the directory of the go.mod above the working directory.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("dbtest: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		up := filepath.Dir(dir)
		if up == dir {
			return "", errors.New("dbtest: no go.mod above the working directory")
		}
		dir = up
	}
}
