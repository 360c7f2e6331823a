package rollout

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/holdfast-db/holdfast/internal/holdfastproc"
)

// ErrNoBase is wrapped by BuildBase's error when the repository's history
// does not hold the base commit (a shallow clone, say).
var ErrNoBase = errors.New("rollout: the base commit is not in the repository's history")

// BuildBase returns a holdfast binary built from commit of the git
// repository at repo: the commit's tree is exported (git archive, which
// leaves the repository as it was: no worktree registered) into a
// directory of its own and built there, with the go command goCmd. A
// commit never changes, so the binary is kept under the user's cache
// directory, by commit and Go version, and reused by later runs. It
// returns the commit's full hash too.
func BuildBase(ctx context.Context, goCmd, repo, commit string) (bin, hash string, err error) {
	out, err := exec.CommandContext(ctx, "git", "-C", repo, "rev-parse", "--verify", "--quiet", commit+"^{commit}").Output()
	if err != nil {
		return "", "", fmt.Errorf("%w: %s in %s (fetch it, or deepen a shallow clone: git fetch --unshallow)", ErrNoBase, commit, repo)
	}
	hash = strings.TrimSpace(string(out))
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	dir := filepath.Join(cache, "holdfast-rollout", hash[:12]+"-"+runtime.Version())
	bin = filepath.Join(dir, "holdfast")
	if _, err := os.Stat(bin); err == nil {
		return bin, hash, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", "", fmt.Errorf("rollout: %w", err)
	}
	src, err := os.MkdirTemp(dir, "src-")
	if err != nil {
		return "", "", fmt.Errorf("rollout: %w", err)
	}
	defer os.RemoveAll(src)
	archive := exec.CommandContext(ctx, "git", "-C", repo, "archive", "--format=tar", hash)
	untar := exec.CommandContext(ctx, "tar", "-x", "-C", src)
	if untar.Stdin, err = archive.StdoutPipe(); err != nil {
		return "", "", fmt.Errorf("rollout: %w", err)
	}
	var archErr strings.Builder
	archive.Stderr = &archErr
	if err := archive.Start(); err != nil {
		return "", "", fmt.Errorf("rollout: git archive: %w", err)
	}
	tarOut, tarErr := untar.CombinedOutput()
	if err := archive.Wait(); err != nil {
		return "", "", fmt.Errorf("rollout: git archive %s: %w: %s", hash, err, archErr.String())
	}
	if tarErr != nil {
		return "", "", fmt.Errorf("rollout: tar: %w: %s", tarErr, tarOut)
	}
	// Built beside the cache's binary, then renamed onto it: a run that
	// finds the binary finds it whole.
	tmp := filepath.Join(src, "holdfast")
	if _, err := (holdfastproc.Build{Go: goCmd, Repo: src, Out: tmp}).Run(ctx); err != nil {
		return "", "", fmt.Errorf("rollout: build %s: %w", commit, err)
	}
	if err := os.Rename(tmp, bin); err != nil {
		return "", "", fmt.Errorf("rollout: %w", err)
	}
	return bin, hash, nil
}
