package imagebuild

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// WriteArchive writes img, named name (e.g. "holdfast:v1.2.0"), as one tar
// file at path that is both an OCI image layout (oci-layout, index.json,
// blobs/sha256/...) and a docker save archive (manifest.json naming the
// same blobs), as docker save writes since Docker 25: docker load, podman
// load, skopeo (oci-archive:) and crane push all read it.
func WriteArchive(path string, img v1.Image, name string) (err error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("imagebuild: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".image-*.tar")
	if err != nil {
		return fmt.Errorf("imagebuild: %w", err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if err := writeArchive(tmp, img, name); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("imagebuild: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("imagebuild: %w", err)
	}
	return nil
}

func writeArchive(w io.Writer, img v1.Image, name string) error {
	tw := tar.NewWriter(w)
	put := func(name string, size int64, body io.Reader) error {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: size, Typeflag: tar.TypeReg}); err != nil {
			return fmt.Errorf("imagebuild: %w", err)
		}
		if n, err := io.Copy(tw, body); err != nil || n != size {
			return fmt.Errorf("imagebuild: %s: wrote %d of %d bytes: %v", name, n, size, err)
		}
		return nil
	}
	putBytes := func(name string, b []byte) error { return put(name, int64(len(b)), bytes.NewReader(b)) }
	blob := func(h v1.Hash) string { return "blobs/" + h.Algorithm + "/" + h.Hex }

	if err := putBytes("oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)); err != nil {
		return err
	}
	layers, err := img.Layers()
	if err != nil {
		return fmt.Errorf("imagebuild: %w", err)
	}
	var layerPaths []string
	for _, l := range layers {
		d, err := l.Digest()
		if err != nil {
			return fmt.Errorf("imagebuild: %w", err)
		}
		size, err := l.Size()
		if err != nil {
			return fmt.Errorf("imagebuild: %w", err)
		}
		rc, err := l.Compressed()
		if err != nil {
			return fmt.Errorf("imagebuild: %w", err)
		}
		err = put(blob(d), size, rc)
		rc.Close()
		if err != nil {
			return err
		}
		layerPaths = append(layerPaths, blob(d))
	}
	cfgName, err := img.ConfigName()
	if err != nil {
		return fmt.Errorf("imagebuild: %w", err)
	}
	rawCfg, err := img.RawConfigFile()
	if err != nil {
		return fmt.Errorf("imagebuild: %w", err)
	}
	if err := putBytes(blob(cfgName), rawCfg); err != nil {
		return err
	}
	rawManifest, err := img.RawManifest()
	if err != nil {
		return fmt.Errorf("imagebuild: %w", err)
	}
	digest, err := img.Digest()
	if err != nil {
		return fmt.Errorf("imagebuild: %w", err)
	}
	if err := putBytes(blob(digest), rawManifest); err != nil {
		return err
	}
	mt, err := img.MediaType()
	if err != nil {
		return fmt.Errorf("imagebuild: %w", err)
	}
	_, tag := splitName(name)
	index, err := json.Marshal(v1.IndexManifest{SchemaVersion: 2, MediaType: types.OCIImageIndex,
		Manifests: []v1.Descriptor{{MediaType: mt, Size: int64(len(rawManifest)), Digest: digest,
			Annotations: map[string]string{"io.containerd.image.name": name, "org.opencontainers.image.ref.name": tag}}}})
	if err != nil {
		return fmt.Errorf("imagebuild: %w", err)
	}
	if err := putBytes("index.json", index); err != nil {
		return err
	}
	docker, err := json.Marshal(tarball.Manifest{{Config: blob(cfgName), RepoTags: []string{name}, Layers: layerPaths}})
	if err != nil {
		return fmt.Errorf("imagebuild: %w", err)
	}
	if err := putBytes("manifest.json", docker); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("imagebuild: %w", err)
	}
	return nil
}

// ReadArchive reads the image of an archive WriteArchive wrote (or any
// docker save archive holding one image).
func ReadArchive(path string) (v1.Image, error) {
	img, err := tarball.ImageFromPath(path, nil)
	if err != nil {
		return nil, fmt.Errorf("imagebuild: %s: %w", path, err)
	}
	return img, nil
}

// splitName splits "repo:tag" (the tag after the last colon that follows
// the last slash); without a tag, the tag is "latest".
func splitName(name string) (repo, tag string) {
	for i := len(name) - 1; i >= 0; i-- {
		switch name[i] {
		case ':':
			return name[:i], name[i+1:]
		case '/':
			return name, "latest"
		}
	}
	return name, "latest"
}
