package manifesttest

import (
	"fmt"
	"io/fs"
	"path"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// File is a file a container sees through its volume mounts.
type File struct {
	Body []byte
	Mode fs.FileMode
	From string // "ConfigMap holdfast-config key config.yaml"
}

// Files returns the files a container of pod sees through its ConfigMap
// and Secret volumes, by absolute path, with the contents the manifests
// give them (objs: every ConfigMap and Secret, by kind and name). It fails
// on a mount of a volume the pod does not have, a ConfigMap or Secret the
// manifests do not hold, or a key it does not have.
func Files(pod *corev1.PodSpec, c *corev1.Container, objs map[string]any) (map[string]File, error) {
	vols := map[string]corev1.Volume{}
	for _, v := range pod.Volumes {
		vols[v.Name] = v
	}
	out := map[string]File{}
	for _, m := range c.VolumeMounts {
		v, ok := vols[m.Name]
		if !ok {
			return nil, fmt.Errorf("container %s mounts volume %s, which the pod does not have", c.Name, m.Name)
		}
		var (
			what  string
			data  map[string][]byte
			items []corev1.KeyToPath
			mode  = fs.FileMode(corev1.SecretVolumeSourceDefaultMode)
		)
		switch {
		case v.ConfigMap != nil:
			what = "ConfigMap " + v.ConfigMap.Name
			cm, ok := objs["ConfigMap/"+v.ConfigMap.Name].(*corev1.ConfigMap)
			if !ok {
				return nil, fmt.Errorf("volume %s: no %s in the manifests", v.Name, what)
			}
			data = map[string][]byte{}
			for k, s := range cm.Data {
				data[k] = []byte(s)
			}
			for k, b := range cm.BinaryData {
				data[k] = b
			}
			items = v.ConfigMap.Items
			if v.ConfigMap.DefaultMode != nil {
				mode = fs.FileMode(*v.ConfigMap.DefaultMode)
			}
		case v.Secret != nil:
			what = "Secret " + v.Secret.SecretName
			s, ok := objs["Secret/"+v.Secret.SecretName].(*corev1.Secret)
			if !ok {
				return nil, fmt.Errorf("volume %s: no %s in the manifests", v.Name, what)
			}
			data = map[string][]byte{}
			for k, b := range s.Data {
				data[k] = b
			}
			for k, str := range s.StringData {
				data[k] = []byte(str)
			}
			items = v.Secret.Items
			if v.Secret.DefaultMode != nil {
				mode = fs.FileMode(*v.Secret.DefaultMode)
			}
		default:
			continue // other volumes hold no file the manifests give
		}
		files := map[string]File{} // relative path -> file
		if len(items) == 0 {
			for k, b := range data {
				files[k] = File{Body: b, Mode: mode, From: what + " key " + k}
			}
		}
		for _, it := range items {
			b, ok := data[it.Key]
			if !ok {
				return nil, fmt.Errorf("volume %s: %s has no key %s", v.Name, what, it.Key)
			}
			f := File{Body: b, Mode: mode, From: what + " key " + it.Key}
			if it.Mode != nil {
				f.Mode = fs.FileMode(*it.Mode)
			}
			files[it.Path] = f
		}
		if m.SubPath != "" {
			f, ok := files[m.SubPath]
			if !ok {
				return nil, fmt.Errorf("container %s: subPath %s of volume %s is not a file of %s", c.Name, m.SubPath, v.Name, what)
			}
			out[path.Clean(m.MountPath)] = f
			continue
		}
		for rel, f := range files {
			out[path.Join(m.MountPath, rel)] = f
		}
	}
	return out, nil
}

// Readable reports whether a container of pod running as its user can
// read f: files of a ConfigMap or Secret volume belong to root and to the
// pod's fsGroup, which every container of the pod has.
func Readable(pod *corev1.PodSpec, c *corev1.Container, f File) bool {
	uid := int64(-1)
	if sc := pod.SecurityContext; sc != nil && sc.RunAsUser != nil {
		uid = *sc.RunAsUser
	}
	if c.SecurityContext != nil && c.SecurityContext.RunAsUser != nil {
		uid = *c.SecurityContext.RunAsUser
	}
	switch {
	case uid == 0:
		return true
	case f.Mode&0o004 != 0:
		return true
	case f.Mode&0o040 != 0:
		return pod.SecurityContext != nil && pod.SecurityContext.FSGroup != nil
	}
	return false
}

// Argv is what a container runs: its command (else the image's
// entrypoint) and its args (else, with no command either, the image's
// Cmd), as the kubelet composes them.
func Argv(c *corev1.Container, entrypoint, cmd []string) []string {
	switch {
	case len(c.Command) > 0:
		return append(append([]string{}, c.Command...), c.Args...)
	case len(c.Args) > 0:
		return append(append([]string{}, entrypoint...), c.Args...)
	}
	return append(append([]string{}, entrypoint...), cmd...)
}

// FlagValue is the value of a Go flag (-name v, -name=v, --name v) in
// argv, and whether it is there.
func FlagValue(argv []string, name string) (string, bool) {
	for i, a := range argv {
		a = strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-")
		if a == name && i+1 < len(argv) {
			return argv[i+1], true
		}
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v, true
		}
	}
	return "", false
}

// ImageName is the repository's last path component of an image
// reference ("registry.example.com/team/holdfast:v1" -> "holdfast").
func ImageName(ref string) string {
	ref, _, _ = strings.Cut(ref, "@")
	base := path.Base(ref)
	name, _, _ := strings.Cut(base, ":")
	return name
}
