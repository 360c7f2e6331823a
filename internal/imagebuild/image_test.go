package imagebuild

import (
	"archive/tar"
	"bufio"
	"context"
	"debug/buildinfo"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"

	"github.com/holdfast-db/holdfast/config"
	"github.com/holdfast-db/holdfast/internal/holdfastproc"
)

// repoRoot is the checkout's top directory.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := holdfastproc.RepoRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// makeCmd is make in the checkout, with a hang guard (the image's first
// build compiles holdfast for it, minutes on a cold cache).
func makeCmd(t *testing.T, args ...string) *exec.Cmd {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	t.Cleanup(cancel)
	cmd := exec.CommandContext(ctx, "make", append([]string{"--no-print-directory", "-C", repoRoot(t)}, args...)...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "MAKE") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	return cmd
}

// layerFile is a file of a layer of the image.
type layerFile struct {
	hdr  *tar.Header
	body []byte
}

// files reads every layer of img: each entry by its absolute path, the
// upper layer's winning.
func files(t *testing.T, img v1.Image) map[string]layerFile {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]layerFile{}
	for _, l := range layers {
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			body, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			out[path.Clean("/"+h.Name)] = layerFile{h, body}
		}
		rc.Close()
	}
	return out
}

// TestImage builds the image as `make image` does and checks what a
// container runtime would run: a non-root user, the entrypoint and
// command, the ports of config.yaml, a static stamped binary built with
// -trimpath, the default configuration, and no shell or anything else
// beyond the files it means to ship. The archive is an OCI image layout
// and a docker save archive at once. deploy/Dockerfile agrees with it.
func TestImage(t *testing.T) {
	archive := filepath.Join(t.TempDir(), "holdfast.tar")
	mk := makeCmd(t, "image", "IMAGE="+archive)
	if out, err := mk.CombinedOutput(); err != nil {
		t.Fatalf("make image: %v\n%s", err, out)
	}
	img, err := ReadArchive(archive)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := cf.Config
	if c.User != "65532:65532" {
		t.Errorf("User %q, want 65532:65532", c.User)
	}
	if got, want := append(slices.Clone(c.Entrypoint), c.Cmd...), []string{"/usr/local/bin/holdfast", "serve", "-config", "/etc/holdfast/config.yaml"}; !slices.Equal(got, want) {
		t.Errorf("Entrypoint and Cmd %q, want %q", got, want)
	}
	if c.WorkingDir != "/" || !slices.Contains(c.Env, "PATH="+Path) {
		t.Errorf("WorkingDir %q, Env %q", c.WorkingDir, c.Env)
	}
	if cf.OS != "linux" || cf.Architecture == "" {
		t.Errorf("platform %s/%s", cf.OS, cf.Architecture)
	}

	// The ports are config.yaml's.
	repoConfig, err := os.ReadFile(filepath.Join(repoRoot(t), "config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse(repoConfig)
	if err != nil {
		t.Fatal(err)
	}
	var ports []string
	for _, addr := range []string{cfg.Listen, cfg.Admin.Listen} {
		_, port, err := net.SplitHostPort(addr)
		if err != nil {
			t.Fatal(err)
		}
		ports = append(ports, port+"/tcp")
	}
	var exposed []string
	for p := range c.ExposedPorts {
		exposed = append(exposed, p)
	}
	slices.Sort(exposed)
	slices.Sort(ports)
	if !slices.Equal(exposed, ports) {
		t.Errorf("ExposedPorts %q; config.yaml listens on %q", exposed, ports)
	}

	// Exactly these files, and no shell.
	fs := files(t, img)
	want := []string{"/etc/group", "/etc/holdfast/config.yaml", "/etc/nsswitch.conf", "/etc/passwd", "/usr/local/bin/holdfast"}
	if _, err := os.Stat(CACertsPath); err == nil {
		want = append(want, CACertsPath)
	}
	var regular []string
	for name, f := range fs {
		base := path.Base(name)
		if slices.Contains([]string{"sh", "bash", "dash", "ash", "zsh", "busybox"}, base) || strings.HasPrefix(name, "/bin") || strings.HasPrefix(name, "/sbin") {
			t.Errorf("the image has %s", name)
		}
		switch f.hdr.Typeflag {
		case tar.TypeReg:
			regular = append(regular, name)
		case tar.TypeDir:
		default:
			t.Errorf("%s: an entry of type %q", name, f.hdr.Typeflag)
		}
		if owner := f.hdr.Uid; owner != 0 && name != HomeDir {
			t.Errorf("%s is owned by %d, not root: the user could change it", name, owner)
		}
	}
	slices.Sort(regular)
	slices.Sort(want)
	if !slices.Equal(regular, want) {
		t.Errorf("files %q, want %q", regular, want)
	}
	for name, mode := range map[string]int64{BinaryPath: 0o755, ConfigPath: 0o644, "/etc/passwd": 0o644, "/tmp": 0o1777, HomeDir: 0o700} {
		if f, ok := fs[name]; !ok || f.hdr.Mode != mode {
			t.Errorf("%s: mode %o (present: %v), want %o", name, f.hdr.Mode, ok, mode)
		}
	}
	if f := fs[HomeDir]; f.hdr == nil || f.hdr.Uid != UID || f.hdr.Gid != GID {
		t.Errorf("%s is not the user's", HomeDir)
	}
	if p := string(fs["/etc/passwd"].body); !strings.Contains(p, "\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n") {
		t.Errorf("/etc/passwd has no nonroot (65532):\n%s", p)
	}
	if g := string(fs["/etc/group"].body); !strings.Contains(g, "\nnonroot:x:65532:\n") {
		t.Errorf("/etc/group has no nonroot (65532):\n%s", g)
	}
	if !slices.Equal(fs[ConfigPath].body, repoConfig) {
		t.Errorf("%s is not the repository's config.yaml", ConfigPath)
	}

	// The binary: static, CGO_ENABLED=0, -trimpath, stamped.
	bin := filepath.Join(t.TempDir(), "holdfast")
	if err := os.WriteFile(bin, fs[BinaryPath].body, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := Platform(bin); err != nil {
		t.Error(err)
	}
	bi, err := buildinfo.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	settings := map[string]string{}
	for _, s := range bi.Settings {
		settings[s.Key] = s.Value
	}
	if settings["-trimpath"] != "true" || settings["CGO_ENABLED"] != "0" {
		t.Errorf("built with -trimpath=%q CGO_ENABLED=%q", settings["-trimpath"], settings["CGO_ENABLED"])
	}
	out, err := exec.Command(bin, "version").Output()
	if err != nil {
		t.Fatalf("%s version: %v", BinaryPath, err)
	}
	version, _, _ := strings.Cut(strings.TrimPrefix(string(out), "holdfast "), "\n")
	if version == "" || strings.Contains(version, "devel") {
		t.Errorf("the image's holdfast is not stamped: %q", out)
	}
	if l := c.Labels["org.opencontainers.image.version"]; l != version {
		t.Errorf("version label %q, the binary says %q", l, version)
	}

	checkLayout(t, archive, img, version)
	checkDockerfile(t)
}

// checkLayout reads the archive as an OCI image layout: the image
// manifest.json names (img), named by its tag.
func checkLayout(t *testing.T, archive string, img v1.Image, version string) {
	t.Helper()
	dir := t.TempDir()
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unpackTar(tar.NewReader(f), dir, false); err != nil {
		t.Fatal(err)
	}
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatalf("not an OCI image layout: %v", err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Manifests) != 1 {
		t.Fatalf("index.json: %+v, want one manifest", m.Manifests)
	}
	if ref := m.Manifests[0].Annotations["org.opencontainers.image.ref.name"]; ref != Tag(version) {
		t.Errorf("ref.name %q, want %q", ref, Tag(version))
	}
	oci, err := idx.Image(m.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	if mt, _ := oci.MediaType(); mt != "application/vnd.oci.image.manifest.v1+json" {
		t.Errorf("manifest media type %s", mt)
	}
	// The same configuration and layers as manifest.json names.
	digests := func(img v1.Image) []string {
		c, err := img.ConfigName()
		if err != nil {
			t.Fatal(err)
		}
		out := []string{c.String()}
		ls, err := img.Layers()
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range ls {
			d, err := l.Digest()
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, d.String())
		}
		return out
	}
	if a, b := digests(oci), digests(img); !slices.Equal(a, b) {
		t.Errorf("index.json's image %q, manifest.json's %q", a, b)
	}
	var docker []struct{ RepoTags []string }
	b, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	if err == nil {
		err = json.Unmarshal(b, &docker)
	}
	if err != nil || len(docker) != 1 || !slices.Equal(docker[0].RepoTags, []string{"holdfast:" + Tag(version)}) {
		t.Errorf("manifest.json: %s (%v)", b, err)
	}
}

// checkDockerfile: deploy/Dockerfile builds the image layout.go
// describes (its user, entrypoint, command, ports, paths), from a static
// binary built with -trimpath, on a base with no shell.
func checkDockerfile(t *testing.T) {
	t.Helper()
	f, err := os.Open(filepath.Join(repoRoot(t), "deploy", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var lines []string // instructions, continuation lines joined, after the last FROM
	var build string   // the go build instruction
	sc := bufio.NewScanner(f)
	for cur := ""; sc.Scan(); {
		l := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(l, "#") || l == "" && cur == "" {
			continue
		}
		if s, ok := strings.CutSuffix(l, "\\"); ok {
			cur += s + " "
			continue
		}
		l, cur = cur+l, ""
		if strings.HasPrefix(l, "FROM ") {
			lines = nil
		}
		if strings.Contains(l, "go build") {
			build = l
		}
		lines = append(lines, l)
	}
	inst := map[string][]string{}
	for _, l := range lines {
		k, v, _ := strings.Cut(l, " ")
		inst[k] = append(inst[k], strings.TrimSpace(v))
	}
	jsonArg := func(k string) []string {
		var v []string
		if len(inst[k]) != 1 || json.Unmarshal([]byte(inst[k][0]), &v) != nil {
			t.Errorf("Dockerfile: want one %s in JSON form, got %q", k, inst[k])
		}
		return v
	}
	if from := inst["FROM"]; len(from) != 1 || !regexp.MustCompile(`^(scratch|gcr\.io/distroless/static\S*:nonroot)$`).MatchString(from[0]) {
		t.Errorf("Dockerfile: final FROM %q, want scratch or distroless/static:nonroot", from)
	}
	if e := jsonArg("ENTRYPOINT"); !slices.Equal(e, Entrypoint) {
		t.Errorf("Dockerfile: ENTRYPOINT %q, want %q", e, Entrypoint)
	}
	if c := jsonArg("CMD"); !slices.Equal(c, Cmd) {
		t.Errorf("Dockerfile: CMD %q, want %q", c, Cmd)
	}
	if u := inst["USER"]; !slices.Equal(u, []string{User}) {
		t.Errorf("Dockerfile: USER %q, want %s", u, User)
	}
	if w := inst["WORKDIR"]; !slices.Equal(w, []string{WorkingDir}) {
		t.Errorf("Dockerfile: WORKDIR %q, want %s", w, WorkingDir)
	}
	exposed := strings.Fields(strings.Join(inst["EXPOSE"], " "))
	if want := []string{strconv.Itoa(ClientPort) + "/tcp", strconv.Itoa(AdminPort) + "/tcp"}; !slices.Equal(exposed, want) {
		t.Errorf("Dockerfile: EXPOSE %q, want %q", exposed, want)
	}
	copies := strings.Join(inst["COPY"], "\n")
	for _, p := range []string{BinaryPath, ConfigPath} {
		if !regexp.MustCompile(`(?m) ` + regexp.QuoteMeta(p) + `$`).MatchString(copies) {
			t.Errorf("Dockerfile: nothing is copied to %s:\n%s", p, copies)
		}
	}
	for _, want := range []string{"CGO_ENABLED=0", "-trimpath", "scripts/ldflags.sh"} {
		if !strings.Contains(build, want) {
			t.Errorf("Dockerfile: the go build does not say %s: %q", want, build)
		}
	}
}
