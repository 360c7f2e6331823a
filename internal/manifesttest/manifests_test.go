package manifesttest

import (
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/holdfast-db/holdfast/admin"
	"github.com/holdfast-db/holdfast/config"
	"github.com/holdfast-db/holdfast/internal/imagebuild"
)

// dir holds the manifests, seen from this package.
const dir = "../../deploy/kubernetes"

// The admin listener's probe routes, answered without a credential:
// admin.LivePath (the process serves, also while the backend is down) and
// admin.ReadyPath (the backend answered and the fleet's controls were
// read; 503 from SIGTERM on). The manifests are held to them, and
// checkProbeRoutes to their being answered so.
const (
	livePath  = admin.LivePath
	readyPath = admin.ReadyPath
)

// graceMargin is what terminationGracePeriodSeconds must leave beyond the
// application's preStop sleep and holdfast's shutdown_grace: holdfast
// stopping its engine, leaving the fleet (up to 2s), closing its pool and
// exiting.
const graceMargin = 5 * time.Second

// gomemlimitShare bounds requests.memory (which GOMEMLIMIT follows)
// against limits.memory: at least this share, and below all of it (the
// headroom is for memory the Go runtime does not count).
const gomemlimitShare = 0.8

// manifests decodes every file of dir.
func manifests(t *testing.T) []Object {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []Object
	for _, e := range ents {
		if e.IsDir() || !(strings.HasSuffix(e.Name(), ".yaml") || strings.HasSuffix(e.Name(), ".yml")) {
			t.Errorf("%s/%s is not a manifest (.yaml): every file of deploy/kubernetes is one", dir, e.Name())
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		objs, err := Decode(e.Name(), b)
		if err != nil {
			t.Error(err)
			continue
		}
		out = append(out, objs...)
	}
	if len(out) == 0 {
		t.Fatal("no manifest decoded")
	}
	return out
}

// TestStrictDecode: a field the API type does not have, one spelled in
// another case, a duplicate key and an unknown kind each fail.
func TestStrictDecode(t *testing.T) {
	good := "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\ndata:\n  a: b\n"
	if _, err := Decode("good", []byte(good)); err != nil {
		t.Fatalf("a good manifest: %v", err)
	}
	for name, doc := range map[string]string{
		"unknown field":   "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\ndatum:\n  a: b\n",
		"wrong case":      "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  Name: x\n",
		"duplicate key":   "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n  name: y\n",
		"unknown kind":    "apiVersion: v1\nkind: Pod2\nmetadata:\n  name: x\n",
		"nested unknown":  "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: x\nspec:\n  template:\n    spec:\n      containers:\n        - name: a\n          imagePullPolicy: Always\n          livenessProbe:\n            httpGet: {path: /livez, port: 1, headers: []}\n",
		"second document": good + "---\napiVersion: v1\nkind: Secret\nmetadata:\n  name: s\nstringdata:\n  a: b\n",
	} {
		if _, err := Decode(name, []byte(doc)); err == nil {
			t.Errorf("%s: decoded without an error", name)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
}

// pod is a pod template of a workload manifest.
type pod struct {
	where  string
	labels map[string]string
	spec   *corev1.PodSpec
}

// TestManifests decodes every manifest and checks that what they say
// agrees with holdfast (see the package doc).
func TestManifests(t *testing.T) {
	objs := manifests(t)
	byName := map[string]any{}
	var pods []pod
	var deployment *appsv1.Deployment
	var pdbs []*policyv1.PodDisruptionBudget
	for _, o := range objs {
		key := o.Kind + "/" + o.Name
		if _, dup := byName[key]; dup {
			t.Errorf("%s: a second %s", o.Where, key)
		}
		byName[key] = o.Value
		switch v := o.Value.(type) {
		case *appsv1.Deployment:
			deployment = v
			pods = append(pods, pod{o.Where, v.Spec.Template.Labels, &v.Spec.Template.Spec})
			checkSelector(t, o.Where, v.Spec.Selector, v.Spec.Template.Labels)
		case *appsv1.StatefulSet:
			pods = append(pods, pod{o.Where, v.Spec.Template.Labels, &v.Spec.Template.Spec})
		case *batchv1.Job:
			pods = append(pods, pod{o.Where, v.Spec.Template.Labels, &v.Spec.Template.Spec})
		case *policyv1.PodDisruptionBudget:
			pdbs = append(pdbs, v)
		}
	}
	if deployment == nil {
		t.Fatal("no Deployment: the example application with holdfast beside it")
	}
	sidecars := 0
	for _, p := range pods {
		for i := range p.spec.InitContainers {
			if c := &p.spec.InitContainers[i]; ImageName(c.Image) == "holdfast" {
				sidecars++
				checkSidecar(t, p, c, byName)
			}
		}
		for i := range p.spec.Containers {
			c := &p.spec.Containers[i]
			if ImageName(c.Image) != "holdfast" {
				continue
			}
			argv := Argv(c, imagebuild.Entrypoint, imagebuild.Cmd)
			if len(argv) > 1 && argv[1] == "serve" {
				t.Errorf("%s: container %s serves holdfast as an application container: run it as a native sidecar (an init container with restartPolicy: Always)", p.where, c.Name)
			}
			checkHoldfast(t, p, c, byName)
		}
	}
	if sidecars == 0 {
		t.Error("no pod runs holdfast as a native sidecar")
	}
	for _, b := range pdbs {
		checkSelector(t, "PodDisruptionBudget "+b.Name, b.Spec.Selector, deployment.Spec.Template.Labels)
	}
	if len(pdbs) == 0 {
		t.Error("no PodDisruptionBudget for the Deployment")
	}
}

func checkSelector(t *testing.T, where string, sel *metav1.LabelSelector, podLabels map[string]string) {
	t.Helper()
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil || s.Empty() || !s.Matches(labels.Set(podLabels)) {
		t.Errorf("%s: the selector %v does not select the pods (labels %v): %v", where, sel, podLabels, err)
	}
}

// loaded is a holdfast container's configuration as holdfast loads it
// from the files the container mounts, and the YAML text it came from.
type loaded struct {
	cfg  config.Config
	node yaml.Node
	argv []string
}

// checkHoldfast: the container runs the image as its user, and its
// configuration loads from the files its mounts provide (every _file it
// names among them, readable by the container's user).
func checkHoldfast(t *testing.T, p pod, c *corev1.Container, objs map[string]any) *loaded {
	t.Helper()
	where := p.where + ": container " + c.Name
	argv := Argv(c, imagebuild.Entrypoint, imagebuild.Cmd)
	if argv[0] != imagebuild.BinaryPath {
		t.Errorf("%s runs %s, not the image's %s", where, argv[0], imagebuild.BinaryPath)
	}
	if u := runAsUser(p.spec, c); u != nil && *u != imagebuild.UID {
		t.Errorf("%s runs as user %d; the image's user is %d", where, *u, imagebuild.UID)
	}
	if !runAsNonRoot(p.spec, c) {
		t.Errorf("%s: runAsNonRoot is not set", where)
	}
	if sc := c.SecurityContext; sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
		sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") {
		t.Errorf("%s: want readOnlyRootFilesystem: true, allowPrivilegeEscalation: false, capabilities.drop [ALL]", where)
	}
	files, err := Files(p.spec, c, objs)
	if err != nil {
		t.Errorf("%s: %v", where, err)
		return nil
	}
	cfgPath, ok := FlagValue(argv, "config")
	if !ok {
		t.Errorf("%s runs %q: no -config", where, argv)
		return nil
	}
	cf, ok := files[cfgPath]
	if !ok {
		t.Errorf("%s: -config %s is not a file of its mounts", where, cfgPath)
		return nil
	}
	l := &loaded{argv: argv}
	if err := yaml.Unmarshal(cf.Body, &l.node); err != nil {
		t.Errorf("%s: %s (%s): %v", where, cfgPath, cf.From, err)
		return nil
	}
	// Every file the configuration names, written under a directory of
	// the test's, the names rewritten to point there: holdfast's config
	// package then loads and validates it as holdfast would in the pod.
	root := t.TempDir()
	for name, f := range files {
		dst := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, f.Body, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	rewritten := rewriteFiles(&l.node, "", func(key, name string) (string, bool) {
		f, ok := files[name]
		if !ok {
			t.Errorf("%s: %s: %s names %s, which no volume of the container provides", where, cfgPath, key, name)
			return "", false
		}
		if !Readable(p.spec, c, f) {
			t.Errorf("%s: %s: %s names %s (%s, mode %o), which the container's user cannot read", where, cfgPath, key, name, f.From, f.Mode)
		}
		return filepath.Join(root, filepath.FromSlash(name)), true
	})
	b, err := yaml.Marshal(rewritten)
	if err != nil {
		t.Fatal(err)
	}
	if l.cfg, err = config.Parse(b); err != nil {
		t.Errorf("%s: %s (%s) does not load: %v", where, cfgPath, cf.From, err)
		return nil
	}
	return l
}

// rewriteFiles returns a copy of n with the value of every key ending in
// _file (password_file, token_file, cert_file, ...) replaced by what
// rename returns for it; path names n ("users[0]").
func rewriteFiles(n *yaml.Node, path string, rename func(key, name string) (string, bool)) *yaml.Node {
	out := *n
	out.Content = make([]*yaml.Node, len(n.Content))
	for i, c := range n.Content {
		switch {
		case n.Kind == yaml.SequenceNode:
			out.Content[i] = rewriteFiles(c, fmt.Sprintf("%s[%d]", path, i), rename)
		case n.Kind != yaml.MappingNode:
			out.Content[i] = rewriteFiles(c, path, rename)
		case i%2 == 0:
			out.Content[i] = c // a key
		default:
			k := n.Content[i-1].Value
			if path != "" {
				k = path + "." + k
			}
			out.Content[i] = rewriteFiles(c, k, rename)
			if c.Kind == yaml.ScalarNode && strings.HasSuffix(k, "_file") && c.Value != "" {
				if v, ok := rename(k, c.Value); ok {
					out.Content[i].Value = v
				}
			}
		}
	}
	return &out
}

// adminTLS reports whether the configuration gives the admin listener a
// certificate (admin.tls.cert_file), read from the YAML so that this holds
// whichever admin settings holdfast has.
func adminTLS(n *yaml.Node) bool {
	v := lookup(n, "admin", "tls", "cert_file")
	return v != nil && v.Value != ""
}

func lookup(n *yaml.Node, keys ...string) *yaml.Node {
	if n.Kind == yaml.DocumentNode && len(n.Content) == 1 {
		n = n.Content[0]
	}
	for _, k := range keys {
		if n.Kind != yaml.MappingNode {
			return nil
		}
		var next *yaml.Node
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == k {
				next = n.Content[i+1]
			}
		}
		if next == nil {
			return nil
		}
		n = next
	}
	return n
}

// checkSidecar: holdfast as a native sidecar beside the application, its
// ports, probes, resources and grace period as the comments say.
func checkSidecar(t *testing.T, p pod, c *corev1.Container, objs map[string]any) {
	t.Helper()
	where := p.where + ": init container " + c.Name
	if c.RestartPolicy == nil || *c.RestartPolicy != corev1.ContainerRestartPolicyAlways {
		t.Errorf("%s: restartPolicy must be Always (a native sidecar: started before the application, stopped after it)", where)
	}
	if c.Lifecycle != nil && c.Lifecycle.PreStop != nil {
		t.Errorf("%s has a preStop hook: a native sidecar's runs only after the application stopped, so it cannot order anything", where)
	}
	l := checkHoldfast(t, p, c, objs)
	if l == nil {
		return
	}
	if len(l.argv) < 2 || l.argv[1] != "serve" {
		t.Errorf("%s runs %q, not holdfast serve", where, l.argv)
	}
	cfg := l.cfg
	if len(p.spec.Containers) == 0 {
		t.Errorf("%s: no application container beside holdfast", where)
	}

	// Ports: the container's are its listeners'; the admin listener is
	// on the pod's IP, where the kubelet probes.
	port := func(addr string) int32 {
		_, ps, err := net.SplitHostPort(addr)
		n, err2 := strconv.Atoi(ps)
		if err != nil || err2 != nil {
			t.Fatalf("%s: address %q", where, addr)
		}
		return int32(n)
	}
	if cfg.Admin.Listen == "" || config.IsLoopback(cfg.Admin.Listen) {
		t.Fatalf("%s: admin.listen %q: the kubelet probes the pod's IP, not its loopback", where, cfg.Admin.Listen)
	}
	clientPort, adminPort := port(cfg.Listen), port(cfg.Admin.Listen)
	declared := map[string]int32{}
	for _, cp := range c.Ports {
		if cp.ContainerPort != adminPort && cp.ContainerPort != clientPort {
			t.Errorf("%s: port %s %d is neither listen (%s) nor admin.listen (%s)", where, cp.Name, cp.ContainerPort, cfg.Listen, cfg.Admin.Listen)
		}
		if cp.ContainerPort == clientPort && config.IsLoopback(cfg.Listen) {
			t.Errorf("%s: port %d is declared, but listen (%s) is the pod's loopback", where, clientPort, cfg.Listen)
		}
		declared[cp.Name] = cp.ContainerPort
	}
	if !slices.Contains(slices.Collect(maps.Values(declared)), adminPort) {
		t.Errorf("%s: no container port for admin.listen (%s)", where, cfg.Admin.Listen)
	}
	if !config.IsLoopback(cfg.Listen) && !slices.Contains(slices.Collect(maps.Values(declared)), clientPort) {
		t.Errorf("%s: no container port for listen (%s)", where, cfg.Listen)
	}

	// Probes: the probe routes, on the admin port, with the admin
	// listener's scheme, with no credential.
	scheme := corev1.URISchemeHTTP
	if adminTLS(&l.node) {
		scheme = corev1.URISchemeHTTPS
	}
	probe := func(name string, pr *corev1.Probe, paths ...string) {
		if pr == nil || pr.HTTPGet == nil {
			t.Errorf("%s: no %s (httpGet)", where, name)
			return
		}
		g := pr.HTTPGet
		if !slices.Contains(paths, g.Path) {
			t.Errorf("%s: %s asks %s, want one of %q", where, name, g.Path, paths)
		}
		got := g.Port.IntVal
		if g.Port.Type == intstr.String {
			var ok bool
			if got, ok = declared[g.Port.StrVal]; !ok {
				t.Errorf("%s: %s names port %q, which the container does not declare", where, name, g.Port.StrVal)
			}
		}
		if got != adminPort {
			t.Errorf("%s: %s asks port %d, admin.listen is %s", where, name, got, cfg.Admin.Listen)
		}
		if s := g.Scheme; s != scheme && !(s == "" && scheme == corev1.URISchemeHTTP) {
			t.Errorf("%s: %s scheme %q, the admin listener serves %s", where, name, s, scheme)
		}
		if g.Host != "" {
			t.Errorf("%s: %s asks host %s: the kubelet probes the pod's IP", where, name, g.Host)
		}
		for _, h := range g.HTTPHeaders {
			if strings.EqualFold(h.Name, "Authorization") {
				t.Errorf("%s: %s sends a credential written in the manifest: the probe routes need none", where, name)
			}
		}
	}
	probe("livenessProbe", c.LivenessProbe, livePath)
	probe("readinessProbe", c.ReadinessProbe, readyPath)
	probe("startupProbe", c.StartupProbe, readyPath, livePath)
	checkProbeRoutes(t, where, cfg, c, declared)

	// The grace period: the application's preStop sleep, shutdown_grace
	// and the margin, one after the other.
	var appSleep time.Duration
	for _, a := range p.spec.Containers {
		if lc := a.Lifecycle; lc != nil && lc.PreStop != nil && lc.PreStop.Sleep != nil {
			appSleep = max(appSleep, time.Duration(lc.PreStop.Sleep.Seconds)*time.Second)
		}
	}
	grace := time.Duration(corev1.DefaultTerminationGracePeriodSeconds) * time.Second
	if g := p.spec.TerminationGracePeriodSeconds; g != nil {
		grace = time.Duration(*g) * time.Second
	}
	if want := appSleep + cfg.ShutdownDelay + cfg.ShutdownGrace + graceMargin; grace < want {
		t.Errorf("%s: terminationGracePeriodSeconds %v < the application's preStop sleep %v + shutdown_delay %v + shutdown_grace %v + %v",
			where, grace, appSleep, cfg.ShutdownDelay, cfg.ShutdownGrace, graceMargin)
	}
	// A native sidecar gets SIGTERM only once the application has
	// stopped: a shutdown_delay would only hold the pod's stop up.
	if cfg.ShutdownDelay != 0 {
		t.Errorf("%s: shutdown_delay %v in a native sidecar, which is stopped after the application: want 0", where, cfg.ShutdownDelay)
	}

	// Memory: GOMEMLIMIT follows requests.memory, under limits.memory.
	req, lim := c.Resources.Requests.Memory(), c.Resources.Limits.Memory()
	if lim.IsZero() || req.IsZero() || req.Cmp(*lim) >= 0 || float64(req.Value()) < gomemlimitShare*float64(lim.Value()) {
		t.Errorf("%s: memory requests %v, limits %v: want both, requests under limits and at least %.0f%% of it", where, req, lim, 100*gomemlimitShare)
	}
	var memlimit *corev1.EnvVar
	for i, e := range c.Env {
		switch e.Name {
		case "GOMEMLIMIT":
			memlimit = &c.Env[i]
		case "GOMAXPROCS":
			if cfg.MaxProcs == 0 {
				t.Errorf("%s: GOMAXPROCS is set: max_procs 0 is meant to follow the CPU limit", where)
			}
		}
	}
	if memlimit == nil || memlimit.ValueFrom == nil || memlimit.ValueFrom.ResourceFieldRef == nil ||
		memlimit.ValueFrom.ResourceFieldRef.Resource != "requests.memory" ||
		!slices.Contains([]string{"", c.Name}, memlimit.ValueFrom.ResourceFieldRef.ContainerName) {
		t.Errorf("%s: GOMEMLIMIT must come from the container's requests.memory (resourceFieldRef)", where)
	}
	// CPU: with max_procs 0 the CPU limit decides.
	if cfg.MaxProcs == 0 && c.Resources.Limits.Cpu().IsZero() {
		t.Errorf("%s: max_procs 0 and no limits.cpu: Go would see every CPU of the node", where)
	}

	// The application: its DSN names holdfast's listener, and the files
	// its environment names are among its mounts.
	for i := range p.spec.Containers {
		a := &p.spec.Containers[i]
		files, err := Files(p.spec, a, objs)
		if err != nil {
			t.Errorf("%s: container %s: %v", p.where, a.Name, err)
			continue
		}
		names := false
		for _, e := range a.Env {
			names = names || strings.Contains(e.Value, cfg.Listen)
			if strings.HasSuffix(e.Name, "_FILE") {
				if f, ok := files[e.Value]; !ok {
					t.Errorf("%s: container %s: %s=%s is not a file of its mounts", p.where, a.Name, e.Name, e.Value)
				} else if !Readable(p.spec, a, f) {
					t.Errorf("%s: container %s: %s=%s is not readable by its user", p.where, a.Name, e.Name, e.Value)
				}
			}
		}
		if !names {
			t.Errorf("%s: container %s: no environment variable names holdfast's listen address %s", p.where, a.Name, cfg.Listen)
		}
	}
}

func runAsUser(pod *corev1.PodSpec, c *corev1.Container) *int64 {
	if c.SecurityContext != nil && c.SecurityContext.RunAsUser != nil {
		return c.SecurityContext.RunAsUser
	}
	if pod.SecurityContext != nil {
		return pod.SecurityContext.RunAsUser
	}
	return nil
}

func runAsNonRoot(pod *corev1.PodSpec, c *corev1.Container) bool {
	if c.SecurityContext != nil && c.SecurityContext.RunAsNonRoot != nil {
		return *c.SecurityContext.RunAsNonRoot
	}
	return pod.SecurityContext != nil && pod.SecurityContext.RunAsNonRoot != nil && *pod.SecurityContext.RunAsNonRoot
}
