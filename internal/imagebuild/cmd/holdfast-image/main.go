// Command holdfast-image builds holdfast's container image as an archive,
// and runs an image archive the way a container runtime would, where none
// is installed (package imagebuild):
//
//	holdfast-image build -binary FILE -config FILE [-ca-certs FILE] [-name holdfast] -out FILE.tar
//	holdfast-image run -image FILE.tar -root DIR [-e NAME=VALUE | -e NAME]... [-- ARGS...]
//	holdfast-image config -image FILE.tar
//
// run unpacks the image into DIR (replacing it) and runs its entrypoint
// there: ARGS replace the image's Cmd, -e adds to its environment (a bare
// NAME takes this process's value), as `docker run --network host -e ...
// IMAGE ARGS...` would. It needs root. It passes SIGINT, SIGTERM, SIGHUP
// and SIGQUIT on and exits with the entrypoint's status. config prints
// the image's configuration (JSON).
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/holdfast-db/holdfast/internal/imagebuild"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == imagebuild.EnterArg {
		err := imagebuild.Enter(os.Args[2:])
		fmt.Fprintln(os.Stderr, "holdfast-image:", err)
		os.Exit(127)
	}
	code, err := run(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "holdfast-image:", err)
		os.Exit(1)
	}
	os.Exit(code)
}

func run(args []string) (int, error) {
	if len(args) == 0 {
		return 0, errors.New("want a command: build, run or config")
	}
	cmd, args := args[0], args[1:]
	fs := flag.NewFlagSet("holdfast-image "+cmd, flag.ContinueOnError)
	switch cmd {
	case "build":
		binary := fs.String("binary", "", "a static holdfast binary for Linux (CGO_ENABLED=0)")
		config := fs.String("config", "", "the configuration to ship at "+imagebuild.ConfigPath)
		certs := fs.String("ca-certs", "", "a CA bundle to ship at "+imagebuild.CACertsPath+" (empty: none)")
		name := fs.String("name", "holdfast", "the image's name; its tag is the binary's version")
		out := fs.String("out", "", "the archive to write")
		if err := fs.Parse(args); err != nil {
			return 2, err
		}
		if *out == "" {
			return 2, errors.New("build: -out is required")
		}
		return 0, build(*binary, *config, *certs, *name, *out)
	case "run":
		image := fs.String("image", "", "the image archive")
		root := fs.String("root", "", "the directory to unpack it into (replaced)")
		var env []string
		fs.Func("e", "NAME=VALUE (or NAME: this process's value) added to the image's environment; repeatable", func(s string) error {
			if !strings.Contains(s, "=") {
				v, ok := os.LookupEnv(s)
				if !ok {
					return nil // as docker run: an unset NAME is left out
				}
				s += "=" + v
			}
			env = append(env, s)
			return nil
		})
		if err := fs.Parse(args); err != nil {
			return 2, err
		}
		if *image == "" || *root == "" {
			return 2, errors.New("run: -image and -root are required")
		}
		return runImage(*image, *root, env, fs.Args())
	case "config":
		image := fs.String("image", "", "the image archive")
		if err := fs.Parse(args); err != nil {
			return 2, err
		}
		img, err := imagebuild.ReadArchive(*image)
		if err != nil {
			return 1, err
		}
		cfg, err := img.ConfigFile()
		if err != nil {
			return 1, err
		}
		b, err := json.MarshalIndent(cfg, "", "  ")
		if err != nil {
			return 1, err
		}
		fmt.Println(string(b))
		return 0, nil
	}
	return 2, fmt.Errorf("unknown command %q (want build, run or config)", cmd)
}

// build writes the image of binary and config to out, named name and
// tagged with the binary's version.
func build(binary, config, certs, name, out string) error {
	platform, err := imagebuild.Platform(binary)
	if err != nil {
		return err
	}
	spec := imagebuild.Spec{Binary: binary, Config: config, CACerts: certs, Created: time.Now()}
	// The labels are what the binary says of itself, when it runs here.
	if platform.OS == runtime.GOOS && platform.Architecture == runtime.GOARCH {
		stamp, err := exec.Command(binary, "version").Output()
		if err != nil {
			return fmt.Errorf("build: %s version: %w", binary, err)
		}
		spec.Version, spec.Commit, spec.Created = parseVersion(string(stamp), spec.Created)
	}
	img, err := imagebuild.Build(spec)
	if err != nil {
		return err
	}
	ref := name + ":" + imagebuild.Tag(spec.Version)
	if err := imagebuild.WriteArchive(out, img, ref); err != nil {
		return err
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	fi, err := os.Stat(out)
	if err != nil {
		return err
	}
	fmt.Printf("image %s (%s, %s/%s, %.1f MB) written to %s\n", ref, digest, platform.OS, platform.Architecture, float64(fi.Size())/1e6, out)
	return nil
}

// parseVersion reads `holdfast version`'s output: the version, the
// commit ("" when unknown) and the build time (else dflt).
func parseVersion(out string, dflt time.Time) (version, commit string, built time.Time) {
	built = dflt
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		switch f[0] {
		case "holdfast":
			version = f[1]
		case "commit":
			if f[1] != "unknown" {
				commit = f[1]
			}
		case "built":
			if t, err := time.Parse(time.RFC3339, f[1]); err == nil {
				built = t
			}
		}
	}
	return version, commit, built
}

// runImage runs the image's entrypoint (see package doc) and returns its
// exit status.
func runImage(image, root string, env, args []string) (int, error) {
	img, err := imagebuild.ReadArchive(image)
	if err != nil {
		return 1, err
	}
	c, err := imagebuild.Prepare(img, root)
	if err != nil {
		return 1, err
	}
	cmd, err := c.Command(args, env)
	if err != nil {
		return 1, err
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	defer signal.Stop(sigs)
	if err := cmd.Start(); err != nil {
		return 1, err
	}
	go func() {
		for s := range sigs {
			_ = cmd.Process.Signal(s)
		}
	}()
	err = cmd.Wait()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0, nil
	case errors.As(err, &exit):
		if ws, ok := exit.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal()), nil
		}
		return exit.ExitCode(), nil
	}
	return 1, err
}
