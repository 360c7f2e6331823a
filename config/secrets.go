package config

import (
	"fmt"
	"os"
	"reflect"
	"strings"

	"gopkg.in/yaml.v3"
)

// Secrets. Every password and token in the configuration (a string field
// named password or token, or ending in _password) may be given instead as
//
//	password_file: /run/secrets/db   # the file's content, one trailing newline dropped
//	password_env: DB_PASSWORD        # the variable's value
//
// so that no secret need be written in config.yaml. The file or variable
// is read each time the configuration is (at start-up and on SIGHUP), its
// value goes into the field as if written there, and only its name ever
// appears in an error. This works for every such field, the engine's
// reservation.redis.password included, without each declaring its own.

// isSecret reports whether a YAML key names a secret field.
func isSecret(key string, t reflect.Type) bool {
	return t.Kind() == reflect.String && (key == "password" || key == "token" || strings.HasSuffix(key, "_password"))
}

// readSecrets replaces each <secret>_file and <secret>_env key of the
// mapping node n (decoded into a struct whose fields are fields) with the
// secret itself, under the key <secret>. Setting more than one of a
// secret's three forms is an error.
func readSecrets(n *yaml.Node, fields map[string]reflect.Type) error {
	given := map[string]string{} // secret -> the form that set it
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		base, form := k.Value, ""
		for _, suffix := range []string{"_file", "_env"} {
			if b, ok := strings.CutSuffix(k.Value, suffix); ok {
				if ft, known := fields[b]; known && isSecret(b, ft) {
					base, form = b, k.Value
				}
			}
		}
		if ft, known := fields[base]; !known || !isSecret(base, ft) {
			continue
		}
		if prev, dup := given[base]; dup {
			return fmt.Errorf("line %d: %s: %s is set too; give a secret one way only", k.Line, k.Value, prev)
		}
		given[base] = k.Value
		if form == "" {
			continue
		}
		if v.Kind != yaml.ScalarNode || v.Value == "" {
			return fmt.Errorf("line %d: %s: want a file name or variable name", k.Line, form)
		}
		var secret string
		if strings.HasSuffix(form, "_file") {
			b, err := os.ReadFile(v.Value)
			if err != nil {
				return fmt.Errorf("line %d: %s: %w", k.Line, form, err)
			}
			secret = strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
			if secret == "" {
				return fmt.Errorf("line %d: %s: %s is empty", k.Line, form, v.Value)
			}
		} else {
			var ok bool
			if secret, ok = os.LookupEnv(v.Value); !ok || secret == "" {
				return fmt.Errorf("line %d: %s: environment variable %s is not set or empty", k.Line, form, v.Value)
			}
		}
		k.Value = base
		*v = yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: secret, Line: v.Line, Column: v.Column}
	}
	return nil
}
