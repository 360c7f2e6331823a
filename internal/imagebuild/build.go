package imagebuild

import (
	"archive/tar"
	"bytes"
	"debug/buildinfo"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"regexp"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Spec is what goes into an image.
type Spec struct {
	// Binary is a holdfast binary for Linux, statically linked
	// (CGO_ENABLED=0): the image has no C library. Required.
	Binary string
	// Config is the configuration file shipped at ConfigPath. Required.
	Config string
	// CACerts is a CA bundle shipped at CACertsPath; "" ships none.
	CACerts string
	// Version and Commit label the image (org.opencontainers.image.*);
	// "" leaves the label out.
	Version, Commit string
	// Created is the image's and its files' time; zero is the Unix epoch.
	Created time.Time
}

// Platform is the operating system and architecture the binary at path
// was built for, and fails unless it is a statically linked Linux
// executable built with CGO_ENABLED=0.
func Platform(path string) (v1.Platform, error) {
	bi, err := buildinfo.ReadFile(path)
	if err != nil {
		return v1.Platform{}, fmt.Errorf("imagebuild: %s: %w", path, err)
	}
	s := map[string]string{}
	for _, kv := range bi.Settings {
		s[kv.Key] = kv.Value
	}
	p := v1.Platform{OS: s["GOOS"], Architecture: s["GOARCH"]}
	if p.OS != "linux" {
		return p, fmt.Errorf("imagebuild: %s is built for GOOS=%s, not linux", path, p.OS)
	}
	if s["CGO_ENABLED"] != "0" {
		return p, fmt.Errorf("imagebuild: %s is built with CGO_ENABLED=%q: the image has no C library; build with CGO_ENABLED=0", path, s["CGO_ENABLED"])
	}
	if p.Architecture == "arm" && s["GOARM"] != "" {
		p.Variant = "v" + strings.TrimSuffix(s["GOARM"], ",softfloat")
	}
	f, err := elf.Open(path)
	if err != nil {
		return p, fmt.Errorf("imagebuild: %s: %w", path, err)
	}
	defer f.Close()
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			return p, fmt.Errorf("imagebuild: %s is dynamically linked (it names an interpreter): the image has no C library", path)
		}
	}
	return p, nil
}

// Build returns the image of spec: three layers on an empty base (the
// users and CA certificates; the configuration; the binary), OCI media
// types, and the configuration of layout.go.
func Build(spec Spec) (v1.Image, error) {
	if spec.Binary == "" || spec.Config == "" {
		return nil, errors.New("imagebuild: a binary and a configuration file are required")
	}
	platform, err := Platform(spec.Binary)
	if err != nil {
		return nil, err
	}
	created := spec.Created.UTC().Truncate(time.Second)
	if spec.Created.IsZero() {
		created = time.Unix(0, 0).UTC()
	}
	read := func(name string) ([]byte, error) {
		b, err := os.ReadFile(name)
		if err != nil {
			return nil, fmt.Errorf("imagebuild: %w", err)
		}
		return b, nil
	}
	binary, err := read(spec.Binary)
	if err != nil {
		return nil, err
	}
	config, err := read(spec.Config)
	if err != nil {
		return nil, err
	}
	base := []entry{
		dir("/etc", 0o755, 0), dir("/etc/ssl", 0o755, 0), dir("/etc/ssl/certs", 0o755, 0),
		file("/etc/passwd", 0o644, fmt.Appendf(nil, "root:x:0:0:root:/root:/sbin/nologin\n%[1]s:x:%[2]d:%[3]d:%[1]s:%[4]s:/sbin/nologin\n", UserName, UID, GID, HomeDir)),
		file("/etc/group", 0o644, fmt.Appendf(nil, "root:x:0:\n%s:x:%d:\n", UserName, GID)),
		file("/etc/nsswitch.conf", 0o644, []byte("hosts: files dns\n")),
		dir("/home", 0o755, 0), dir(HomeDir, 0o700, UID),
		dir("/root", 0o700, 0),
		dir("/tmp", 0o1777, 0),
	}
	what := "users"
	if spec.CACerts != "" {
		certs, err := read(spec.CACerts)
		if err != nil {
			return nil, err
		}
		base = append(base, file(CACertsPath, 0o644, certs))
		what += " and CA certificates"
	}
	layers := []struct {
		entries []entry
		what    string
	}{
		{base, what},
		{[]entry{dir("/etc", 0o755, 0), dir(path.Dir(ConfigPath), 0o755, 0), file(ConfigPath, 0o644, config)}, "the default configuration"},
		{[]entry{dir("/usr", 0o755, 0), dir("/usr/local", 0o755, 0), dir(path.Dir(BinaryPath), 0o755, 0), file(BinaryPath, 0o755, binary)}, "holdfast"},
	}
	labels := map[string]string{
		"org.opencontainers.image.title":       "holdfast",
		"org.opencontainers.image.description": "holdfast, a MySQL-wire sidecar: connection pooling, attribution by tag, inventory reservations",
		"org.opencontainers.image.created":     created.Format(time.RFC3339),
	}
	if spec.Version != "" {
		labels["org.opencontainers.image.version"] = spec.Version
	}
	if spec.Commit != "" {
		labels["org.opencontainers.image.revision"] = spec.Commit
	}
	cfg := &v1.ConfigFile{
		Architecture: platform.Architecture,
		OS:           platform.OS,
		Variant:      platform.Variant,
		Created:      v1.Time{Time: created},
		Config: v1.Config{
			User:       User,
			Entrypoint: Entrypoint,
			Cmd:        Cmd,
			Env:        []string{"PATH=" + Path},
			WorkingDir: WorkingDir,
			ExposedPorts: map[string]struct{}{
				strconv.Itoa(ClientPort) + "/tcp": {},
				strconv.Itoa(AdminPort) + "/tcp":  {},
			},
			Labels: labels,
		},
		RootFS: v1.RootFS{Type: "layers"},
	}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	if img, err = mutate.ConfigFile(img, cfg); err != nil {
		return nil, fmt.Errorf("imagebuild: %w", err)
	}
	for _, l := range layers {
		layer, err := tarLayer(l.entries, created)
		if err != nil {
			return nil, err
		}
		img, err = mutate.Append(img, mutate.Addendum{Layer: layer, MediaType: types.OCILayer,
			History: v1.History{Created: v1.Time{Time: created}, CreatedBy: "holdfast imagebuild: " + l.what}})
		if err != nil {
			return nil, fmt.Errorf("imagebuild: %w", err)
		}
	}
	return img, nil
}

// entry is a file or directory of a layer, owned by uid (its group: the
// same number).
type entry struct {
	name string // absolute
	mode int64
	uid  int
	body []byte
	dir  bool
}

// dir is a directory entry owned by uid; file a file entry owned by root.
func dir(name string, mode int64, uid int) entry {
	return entry{name: name, mode: mode, uid: uid, dir: true}
}

func file(name string, mode int64, body []byte) entry {
	return entry{name: name, mode: mode, body: body}
}

// tarLayer is a gzipped layer of entries, each with the time mtime.
func tarLayer(entries []entry, mtime time.Time) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Name: strings.TrimPrefix(e.name, "/"), Mode: e.mode, Uid: e.uid, Gid: e.uid,
			ModTime: mtime, Format: tar.FormatPAX}
		if e.dir {
			h.Typeflag, h.Name = tar.TypeDir, h.Name+"/"
		} else {
			h.Typeflag, h.Size = tar.TypeReg, int64(len(e.body))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("imagebuild: %w", err)
		}
		if _, err := tw.Write(e.body); err != nil {
			return nil, fmt.Errorf("imagebuild: %w", err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("imagebuild: %w", err)
	}
	b := buf.Bytes()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil },
		tarball.WithMediaType(types.OCILayer), tarball.WithCompressedCaching)
	if err != nil {
		return nil, fmt.Errorf("imagebuild: %w", err)
	}
	return l, nil
}

var notInTag = regexp.MustCompile(`[^A-Za-z0-9_.-]`)

// Tag is a valid image tag for version: characters a tag may not hold
// become "-"; "" is "latest".
func Tag(version string) string {
	if version == "" {
		return "latest"
	}
	t := notInTag.ReplaceAllString(version, "-")
	if t[0] == '.' || t[0] == '-' {
		t = "v" + t
	}
	return t[:min(len(t), 128)]
}
