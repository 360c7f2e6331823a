package imagebuild

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// Container is an image unpacked into a root directory, ready to run as
// the image says. Build it with Prepare.
type Container struct {
	Root   string    // the unpacked filesystem
	Config v1.Config // the image's configuration
}

// EnterArg is the first argument that makes a program calling Enter from
// its main enter the container: Command runs the calling program itself
// again with it (os.Executable).
const EnterArg = "__enter_container"

// Prepare unpacks img into root, replacing what an earlier Prepare
// unpacked there (it refuses to remove any other directory that holds
// files), and adds what
// a container runtime provides: an empty /proc to mount on, and the
// host's /etc/hosts and /etc/resolv.conf (the container shares the host's
// network).
func Prepare(img v1.Image, root string) (*Container, error) {
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("imagebuild: %w", err)
	}
	root, err = filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("imagebuild: %w", err)
	}
	// A marker beside root says Prepare made it: a directory it did not
	// make is never removed.
	marker := root + ".unpacked"
	if ents, err := os.ReadDir(root); err == nil && len(ents) > 0 {
		if _, err := os.Stat(marker); err != nil {
			return nil, fmt.Errorf("imagebuild: %s holds files and is not an image unpacked here before (no %s): not removing it", root, marker)
		}
	}
	if err := os.RemoveAll(root); err != nil {
		return nil, fmt.Errorf("imagebuild: %w", err)
	}
	if err := os.WriteFile(marker, []byte("unpacked by holdfast-image; the directory beside it is replaced on each run\n"), 0o644); err != nil {
		return nil, fmt.Errorf("imagebuild: %w", err)
	}
	if err := Unpack(img, root); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(root, "proc"), 0o555); err != nil {
		return nil, fmt.Errorf("imagebuild: %w", err)
	}
	for _, f := range []string{"/etc/hosts", "/etc/resolv.conf"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // the host has none: neither has the container
		}
		if err := mkdirParents(root, f[1:]); err != nil {
			return nil, err
		}
		dst := filepath.Join(root, f)
		if fi, err := os.Lstat(dst); err == nil && !fi.Mode().IsRegular() {
			return nil, fmt.Errorf("imagebuild: %s in the image is not a regular file", f)
		}
		if err := os.WriteFile(dst, b, 0o644); err != nil {
			return nil, fmt.Errorf("imagebuild: %w", err)
		}
	}
	return &Container{Root: root, Config: cfg.Config}, nil
}

// Command returns the command that runs the container's entrypoint:
// Entrypoint followed by args, or by Cmd when args is empty (as
// `docker run IMAGE args...`); the image's Env with env added after it
// (as `docker run -e`), and nothing of this process's environment; its
// WorkingDir; as its User; with Root as its root directory and /proc
// mounted there, in a mount namespace of its own. The command is this
// program run again with EnterArg, whose main must call Enter; it
// becomes the entrypoint (exec) once inside. It needs root.
func (c *Container) Command(args, env []string) (*exec.Cmd, error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("imagebuild: running an image needs root, as a container runtime does (chroot, its user, a mount namespace for /proc)")
	}
	argv := append(append([]string{}, c.Config.Entrypoint...), c.Config.Cmd...)
	if len(args) > 0 {
		argv = append(append([]string{}, c.Config.Entrypoint...), args...)
	}
	if len(argv) == 0 {
		return nil, errors.New("imagebuild: the image has neither Entrypoint nor Cmd")
	}
	fullEnv := append(append([]string{}, c.Config.Env...), env...)
	prog, err := c.lookPath(argv[0], fullEnv)
	if err != nil {
		return nil, err
	}
	uid, gid, err := c.user()
	if err != nil {
		return nil, err
	}
	wd := c.Config.WorkingDir
	if wd == "" {
		wd = "/"
	}
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("imagebuild: %w", err)
	}
	cmd := exec.Command(self, append([]string{EnterArg, c.Root, wd, strconv.Itoa(uid), strconv.Itoa(gid), prog}, argv...)...)
	cmd.Env = fullEnv
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS} // Go makes its mounts private
	return cmd, nil
}

// Enter is the entering half of Command, called by main with the
// arguments after EnterArg: it mounts /proc under the root, makes the
// root its root directory, changes to the working directory, drops to
// the user (no supplementary groups) and executes the entrypoint with
// this process's environment. It returns only on failure.
func Enter(args []string) error {
	if len(args) < 6 {
		return fmt.Errorf("imagebuild: enter: want root, workdir, uid, gid, program and argv; got %q", args)
	}
	root, wd, prog, argv := args[0], args[1], args[4], args[5:]
	uid, err1 := strconv.Atoi(args[2])
	gid, err2 := strconv.Atoi(args[3])
	if err := errors.Join(err1, err2); err != nil {
		return fmt.Errorf("imagebuild: enter: %w", err)
	}
	if err := syscall.Mount("proc", filepath.Join(root, "proc"), "proc", syscall.MS_NOSUID|syscall.MS_NODEV|syscall.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("imagebuild: enter: mount /proc: %w", err)
	}
	if err := syscall.Chroot(root); err != nil {
		return fmt.Errorf("imagebuild: enter: chroot %s: %w", root, err)
	}
	if err := syscall.Chdir(wd); err != nil {
		return fmt.Errorf("imagebuild: enter: working directory %s: %w", wd, err)
	}
	if err := syscall.Setgroups(nil); err != nil {
		return fmt.Errorf("imagebuild: enter: setgroups: %w", err)
	}
	if err := syscall.Setgid(gid); err != nil {
		return fmt.Errorf("imagebuild: enter: setgid %d: %w", gid, err)
	}
	if err := syscall.Setuid(uid); err != nil {
		return fmt.Errorf("imagebuild: enter: setuid %d: %w", uid, err)
	}
	err := syscall.Exec(prog, argv, os.Environ())
	return fmt.Errorf("imagebuild: enter: exec %s: %w", prog, err)
}

// lookPath finds name in the container: as it is when it holds a slash,
// else in the directories of PATH in env.
func (c *Container) lookPath(name string, env []string) (string, error) {
	dirs := []string{""}
	if !strings.Contains(name, "/") {
		dirs = nil
		for _, kv := range env {
			if p, ok := strings.CutPrefix(kv, "PATH="); ok {
				dirs = filepath.SplitList(p)
			}
		}
	}
	for _, d := range dirs {
		p := path.Join("/", d, name)
		if !path.IsAbs(name) && d == "" {
			p = path.Join("/", c.Config.WorkingDir, name)
		}
		if fi, err := os.Stat(filepath.Join(c.Root, p)); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("imagebuild: the entrypoint %s is not an executable file of the image", name)
}

// user resolves the image's User ("uid", "uid:gid", or names in the
// image's /etc/passwd and /etc/group; "" is root).
func (c *Container) user() (uid, gid int, err error) {
	u, g, hasGroup := strings.Cut(c.Config.User, ":")
	if u == "" {
		return 0, 0, nil
	}
	uid, primary, err := c.lookup("etc/passwd", u, 2, 3)
	if err != nil {
		return 0, 0, err
	}
	gid = primary
	if hasGroup {
		if gid, _, err = c.lookup("etc/group", g, 2, 2); err != nil {
			return 0, 0, err
		}
	} else if primary < 0 {
		gid = uid
	}
	return uid, gid, nil
}

// lookup reads a number: s itself, or field idField of the line of file
// (in the root) whose first field is s; also field extraField of that
// line (-1 when s was a number).
func (c *Container) lookup(file, s string, idField, extraField int) (id, extra int, err error) {
	if n, err := strconv.Atoi(s); err == nil {
		return n, -1, nil
	}
	f, err := os.Open(filepath.Join(c.Root, file))
	if err != nil {
		return 0, 0, fmt.Errorf("imagebuild: the image's user %q: %w", s, err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Split(sc.Text(), ":")
		if len(fields) > max(idField, extraField) && fields[0] == s {
			id, err1 := strconv.Atoi(fields[idField])
			extra, err2 := strconv.Atoi(fields[extraField])
			if err := errors.Join(err1, err2); err != nil {
				return 0, 0, fmt.Errorf("imagebuild: /%s: %q: %w", file, s, err)
			}
			return id, extra, nil
		}
	}
	return 0, 0, fmt.Errorf("imagebuild: the image's user %q is not in /%s: %w", s, file, fs.ErrNotExist)
}
