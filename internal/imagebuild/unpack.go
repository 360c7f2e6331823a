package imagebuild

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
)

// Unpack writes img's filesystem (its layers applied in order, whiteouts
// honoured) into root, which must not exist or be empty. Files keep their
// modes, and their owners when the caller is root. It never writes
// through a symbolic link of the image, so nothing lands outside root.
func Unpack(img v1.Image, root string) error {
	if err := os.MkdirAll(root, 0o755); err != nil {
		return fmt.Errorf("imagebuild: %w", err)
	}
	if ents, err := os.ReadDir(root); err != nil || len(ents) > 0 {
		return fmt.Errorf("imagebuild: unpack into %s: not an empty directory (%v)", root, err)
	}
	rc := mutate.Extract(img)
	defer rc.Close()
	return unpackTar(tar.NewReader(rc), root, os.Geteuid() == 0)
}

// unpackTar writes the entries of a flattened image filesystem (upper
// layers' entries first, as mutate.Extract yields them: a directory's
// header may follow its files) into root; owners are applied when chown.
func unpackTar(tr *tar.Reader, root string, chown bool) error {
	type meta struct {
		name     string
		mode     fs.FileMode
		uid, gid int
		link     bool
	}
	var metas []meta // applied last: a directory's mode must not stop writes into it
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("imagebuild: reading the image: %w", err)
		}
		rel := path.Clean("/" + h.Name)[1:]
		if rel == "" {
			continue // the root itself
		}
		dst := filepath.Join(root, filepath.FromSlash(rel))
		if err := mkdirParents(root, rel); err != nil {
			return err
		}
		mode := h.FileInfo().Mode()
		switch h.Typeflag {
		case tar.TypeDir:
			if fi, err := os.Lstat(dst); err == nil && !fi.IsDir() {
				return fmt.Errorf("imagebuild: /%s: a directory over a file", rel)
			} else if err != nil {
				if err := os.Mkdir(dst, 0o755); err != nil {
					return fmt.Errorf("imagebuild: %w", err)
				}
			}
		case tar.TypeReg:
			f, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
			if err != nil {
				return fmt.Errorf("imagebuild: %w", err)
			}
			_, err = io.CopyN(f, tr, h.Size)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return fmt.Errorf("imagebuild: /%s: %w", rel, err)
			}
		case tar.TypeSymlink:
			if err := os.Symlink(h.Linkname, dst); err != nil {
				return fmt.Errorf("imagebuild: %w", err)
			}
		case tar.TypeLink:
			target := path.Clean("/" + h.Linkname)[1:]
			if err := mkdirParents(root, target); err != nil {
				return err
			}
			if err := os.Link(filepath.Join(root, filepath.FromSlash(target)), dst); err != nil {
				return fmt.Errorf("imagebuild: %w", err)
			}
			continue // shares its target's mode and owner
		default:
			return fmt.Errorf("imagebuild: /%s: entries of type %q are not supported", rel, h.Typeflag)
		}
		metas = append(metas, meta{dst, mode, h.Uid, h.Gid, h.Typeflag == tar.TypeSymlink})
	}
	// Deepest first, so that a directory's own mode comes after its
	// contents were written.
	for i := len(metas) - 1; i >= 0; i-- {
		m := metas[i]
		if chown {
			if err := os.Lchown(m.name, m.uid, m.gid); err != nil {
				return fmt.Errorf("imagebuild: %w", err)
			}
		}
		if !m.link {
			if err := os.Chmod(m.name, m.mode&(fs.ModePerm|fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky)); err != nil {
				return fmt.Errorf("imagebuild: %w", err)
			}
		}
	}
	return nil
}

// mkdirParents makes the directories above rel (slash-separated, relative
// to root) that do not exist, and fails when one that exists is not a
// directory (a symbolic link included): writing through it could leave
// root.
func mkdirParents(root, rel string) error {
	dir := root
	parts := strings.Split(rel, "/")
	for _, p := range parts[:len(parts)-1] {
		dir = filepath.Join(dir, p)
		fi, err := os.Lstat(dir)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			if err := os.Mkdir(dir, 0o755); err != nil {
				return fmt.Errorf("imagebuild: %w", err)
			}
		case err != nil:
			return fmt.Errorf("imagebuild: %w", err)
		case !fi.IsDir():
			return fmt.Errorf("imagebuild: /%s: a parent is not a directory (a symbolic link is not followed)", rel)
		}
	}
	return nil
}
