package main

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"path/filepath"

	"github.com/holdfast-db/holdfast/admin"
	"github.com/holdfast-db/holdfast/config"
)

// adminAccess is who may reach the admin listener, as cfg says: its
// credentials (admin.credentials, admin.token), its certificate and
// address, and the local credential's token (admin.local_token_path),
// kept from last when its file is the same, else fresh. It reads the
// certificate but writes nothing: writeLocalToken does, once the Access
// is in force.
type adminAccess struct {
	admin.Access
	local localToken // zero: no local credential
}

// localToken is the local credential's token and the file it goes to.
type localToken struct{ path, token string }

func newAdminAccess(configPath string, cfg config.Admin, last localToken) (adminAccess, error) {
	out := adminAccess{Access: admin.Access{Listen: cfg.Listen}}
	for _, c := range cfg.AllCredentials() {
		scope, err := admin.ParseScope(c.Scope)
		if err != nil {
			return adminAccess{}, err
		}
		out.Credentials = append(out.Credentials, admin.Credential{Name: c.Name, Scope: scope, Token: c.Token})
	}
	if cfg.LocalTokenPath != "" {
		path, err := nearConfig(configPath, cfg.LocalTokenPath)
		if err != nil {
			return adminAccess{}, err
		}
		out.local = last
		if last.path != path {
			var b [admin.LocalTokenLen / 2]byte
			if _, err := rand.Read(b[:]); err != nil {
				return adminAccess{}, fmt.Errorf("admin.local_token_path: %w", err)
			}
			out.local = localToken{path: path, token: hex.EncodeToString(b[:])}
		}
		out.LocalTokenPath = path
		out.Credentials = append(out.Credentials, admin.Credential{Name: config.LocalCredential, Scope: admin.ScopeWrite, Token: out.local.token})
	}
	if cfg.TLS.CertFile != "" {
		tc, err := admin.LoadTLS(cfg.TLS.CertFile, cfg.TLS.KeyFile)
		if err != nil {
			return adminAccess{}, err
		}
		out.TLS = tc
	}
	return out, nil
}

// writeLocalToken writes the local credential's token to its file when it
// is new (not last's). A file that cannot be written leaves holdfastctl on
// this machine to find another credential: a warning, not a failure.
func (ac adminAccess) writeLocalToken(last localToken, log *slog.Logger) {
	if ac.local == last || ac.local.path == "" {
		return
	}
	if err := admin.WriteLocalToken(ac.local.path, ac.local.token); err != nil {
		log.Warn("the local admin credential's token could not be written: holdfastctl on this machine needs another credential "+
			"(admin.credentials; see README.md, \"Admin API\")", "admin.local_token_path", ac.local.path, "err", err)
		return
	}
	log.Info("the local admin credential's token is written for holdfastctl on this machine", "admin.local_token_path", ac.local.path)
}

// nearConfig makes path absolute, from the configuration file's
// directory when it is relative (the working directory without a file).
func nearConfig(configPath, path string) (string, error) {
	if !filepath.IsAbs(path) && configPath != "" {
		path = filepath.Join(filepath.Dir(configPath), path)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", fmt.Errorf("admin.local_token_path: %w", err)
	}
	return abs, nil
}

// reloadAdmin applies the admin section of a reloaded configuration, whole
// or not at all; it returns the local token in force after it, and why
// the section was refused (nil: applied).
func reloadAdmin(adm *admin.Admin, configPath string, next config.Admin, last localToken, log *slog.Logger) (localToken, error) {
	if next.Listen == "" {
		log.Error("reload: admin.listen was emptied; the admin listener stays on until a restart", "admin.listen", adm.Listen())
		return last, fmt.Errorf("admin.listen was emptied: the admin listener stays on %s until a restart", adm.Listen())
	}
	ac, err := newAdminAccess(configPath, next, last)
	if err == nil {
		err = adm.Reload(ac.Access)
	}
	if err != nil {
		log.Error("reload: the admin section is refused; the admin listener keeps its address, credentials and certificate",
			"admin.listen", adm.Listen(), "err", err)
		return last, fmt.Errorf("the admin section is refused (the admin listener keeps its address, credentials and certificate): %w", err)
	}
	ac.writeLocalToken(last, log)
	return ac.local, nil
}
