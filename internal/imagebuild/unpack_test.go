package imagebuild

import (
	"archive/tar"
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
)

// layerOf is a layer of entries; a name ending in "/" is a directory, a
// body starting with "->" a symbolic link to the rest.
func layerOf(t *testing.T, entries ...[2]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Name: e[0], Mode: 0o644, ModTime: time.Unix(0, 0)}
		switch {
		case strings.HasSuffix(e[0], "/"):
			h.Typeflag, h.Mode = tar.TypeDir, 0o755
		case strings.HasPrefix(e[1], "->"):
			h.Typeflag, h.Linkname = tar.TypeSymlink, e[1][2:]
		default:
			h.Typeflag, h.Size = tar.TypeReg, int64(len(e[1]))
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write([]byte(e[1])); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestUnpackLayersAndWhiteouts(t *testing.T) {
	lower := layerOf(t, [2]string{"etc/", ""}, [2]string{"etc/a", "old"}, [2]string{"etc/gone", "x"}, [2]string{"etc/link", "->a"})
	upper := layerOf(t, [2]string{"etc/a", "new"}, [2]string{"etc/.wh.gone", ""}, [2]string{"usr/local/bin/x", "bin"})
	img, err := mutate.AppendLayers(empty.Image, mustLayer(t, lower), mustLayer(t, upper))
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(t.TempDir(), "root")
	if err := Unpack(img, root); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(root, "etc/a")); err != nil || string(b) != "new" {
		t.Errorf("etc/a: %q, %v; want the upper layer's", b, err)
	}
	if _, err := os.Lstat(filepath.Join(root, "etc/gone")); !os.IsNotExist(err) {
		t.Errorf("etc/gone, whited out: %v", err)
	}
	if l, err := os.Readlink(filepath.Join(root, "etc/link")); err != nil || l != "a" {
		t.Errorf("etc/link: %q, %v", l, err)
	}
	if b, err := os.ReadFile(filepath.Join(root, "usr/local/bin/x")); err != nil || string(b) != "bin" {
		t.Errorf("usr/local/bin/x (parents made): %q, %v", b, err)
	}
	if err := Unpack(img, root); err == nil {
		t.Error("unpacked into a directory that is not empty")
	}
}

// TestUnpackNeverFollowsLinks: nothing is written through a symbolic
// link of the image, whether the image's flattening drops the file under
// it (Unpack) or a stream carries one anyway (unpackTar refuses it).
func TestUnpackNeverFollowsLinks(t *testing.T) {
	outside := t.TempDir()
	layer := layerOf(t, [2]string{"escape", "->" + outside}, [2]string{"escape/owned", "x"})
	img, err := mutate.AppendLayers(empty.Image, mustLayer(t, layer))
	if err != nil {
		t.Fatal(err)
	}
	if err := Unpack(img, filepath.Join(t.TempDir(), "root")); err != nil {
		t.Logf("Unpack: %v", err)
	}
	err = unpackTar(tar.NewReader(bytes.NewReader(layer)), t.TempDir(), false)
	if err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Errorf("unpackTar: %v, want a refusal", err)
	}
	if _, err := os.Stat(filepath.Join(outside, "owned")); !os.IsNotExist(err) {
		t.Errorf("a file was written outside the root: %v", err)
	}
}

func TestTag(t *testing.T) {
	for in, want := range map[string]string{
		"":               "latest",
		"f22f59f-dirty":  "f22f59f-dirty",
		"v1.2.0":         "v1.2.0",
		"v0.0.0-2026+d":  "v0.0.0-2026-d",
		"-x":             "v-x",
		"devel (local)":  "devel--local-",
		"release/1.2.0b": "release-1.2.0b",
	} {
		if got := Tag(in); got != want {
			t.Errorf("Tag(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestSplitName(t *testing.T) {
	for in, want := range map[string][2]string{
		"holdfast:v1":                 {"holdfast", "v1"},
		"holdfast":                    {"holdfast", "latest"},
		"registry:5000/holdfast":      {"registry:5000/holdfast", "latest"},
		"registry:5000/holdfast:v1.2": {"registry:5000/holdfast", "v1.2"},
	} {
		if r, tag := splitName(in); r != want[0] || tag != want[1] {
			t.Errorf("splitName(%q) = %q, %q; want %q", in, r, tag, want)
		}
	}
}

// TestPrepareKeepsOtherDirectories: Prepare replaces a root it unpacked
// before, and refuses to remove a directory it did not make.
func TestPrepareKeepsOtherDirectories(t *testing.T) {
	img, err := mutate.AppendLayers(empty.Image, mustLayer(t, layerOf(t, [2]string{"etc/a", "x"})))
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(t.TempDir(), "root")
	for range 2 {
		if _, err := Prepare(img, root); err != nil {
			t.Fatal(err)
		}
	}
	mine := t.TempDir()
	if err := os.WriteFile(filepath.Join(mine, "precious"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Prepare(img, mine); err == nil {
		t.Error("Prepare replaced a directory it did not make")
	}
	if _, err := os.Stat(filepath.Join(mine, "precious")); err != nil {
		t.Errorf("the directory's file: %v", err)
	}
}
