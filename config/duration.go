package config

import (
	"fmt"
	"reflect"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

var durationType = reflect.TypeOf(time.Duration(0))

// checkTree walks the YAML tree n that will be decoded into a value of type
// t. It refuses keys that name no field (as yaml.v3's KnownFields does,
// which a decode from a node cannot ask for) and rewrites every bare
// integer 0 given for a time.Duration into "0s": yaml.v3 rejects a bare
// integer for a duration ("cannot unmarshal !!int `0` into
// time.Duration"), yet config.yaml documents settings as "0: off" and
// operators write them so. Other bare integers stay errors: "30" has no
// unit and no safe reading.
func checkTree(n *yaml.Node, t reflect.Type) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			if err := checkTree(c, t); err != nil {
				return err
			}
		}
	case yaml.ScalarNode:
		if t == durationType && n.Tag == "!!int" && strings.TrimLeft(n.Value, "+-0") == "" {
			n.Tag, n.Value = "!!str", "0s"
		}
	case yaml.SequenceNode:
		if t.Kind() == reflect.Slice || t.Kind() == reflect.Array {
			for _, c := range n.Content {
				if err := checkTree(c, t.Elem()); err != nil {
					return err
				}
			}
		}
	case yaml.MappingNode:
		switch t.Kind() {
		case reflect.Map:
			for i := 1; i < len(n.Content); i += 2 {
				if err := checkTree(n.Content[i], t.Elem()); err != nil {
					return err
				}
			}
		case reflect.Struct:
			if reflect.PointerTo(t).Implements(unmarshalerType) {
				return nil
			}
			fields := yamlFields(t)
			if err := readSecrets(n, fields); err != nil {
				return err
			}
			for i := 0; i+1 < len(n.Content); i += 2 {
				k := n.Content[i]
				ft, ok := fields[k.Value]
				if !ok {
					return fmt.Errorf("line %d: field %s not found in type %s", k.Line, k.Value, t)
				}
				if err := checkTree(n.Content[i+1], ft); err != nil {
					return err
				}
			}
		}
	case yaml.AliasNode:
		if n.Alias != nil {
			return checkTree(n.Alias, t)
		}
	}
	return nil
}

var unmarshalerType = reflect.TypeOf((*yaml.Unmarshaler)(nil)).Elem()

// yamlFields maps the YAML keys of struct type t (inline structs flattened)
// to their field types, as yaml.v3 names them.
func yamlFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "-" {
			continue
		}
		if strings.Contains(opts, "inline") {
			for k, v := range yamlFields(f.Type) {
				out[k] = v
			}
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		out[name] = f.Type
	}
	return out
}
