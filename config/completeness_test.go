package config

import (
	"os"
	"reflect"
	"sort"
	"testing"

	"gopkg.in/yaml.v3"
)

// TestConfigYAMLListsEverySetting: config.yaml, the documented defaults,
// names every setting there is (a list's first element stands for the
// element type).
func TestConfigYAMLListsEverySetting(t *testing.T) {
	b, err := os.ReadFile("../config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var root yaml.Node
	if err := yaml.Unmarshal(b, &root); err != nil {
		t.Fatal(err)
	}
	var missing []string
	var walk func(n *yaml.Node, typ reflect.Type, path string)
	walk = func(n *yaml.Node, typ reflect.Type, path string) {
		for typ.Kind() == reflect.Pointer {
			typ = typ.Elem()
		}
		switch typ.Kind() {
		case reflect.Struct:
			if reflect.PointerTo(typ).Implements(unmarshalerType) || typ == durationType {
				return
			}
			if n.Kind != yaml.MappingNode {
				missing = append(missing, path+" (not a mapping in config.yaml)")
				return
			}
			have := map[string]*yaml.Node{}
			for i := 0; i+1 < len(n.Content); i += 2 {
				have[n.Content[i].Value] = n.Content[i+1]
			}
			for name, ft := range yamlFields(typ) {
				child, ok := have[name]
				if !ok {
					missing = append(missing, path+name)
					continue
				}
				walk(child, ft, path+name+".")
			}
		case reflect.Slice:
			if n.Kind == yaml.SequenceNode && len(n.Content) > 0 {
				walk(n.Content[0], typ.Elem(), path[:len(path)-1]+"[0].")
			}
		}
	}
	walk(root.Content[0], reflect.TypeOf(Config{}), "")
	sort.Strings(missing)
	for _, m := range missing {
		t.Errorf("config.yaml does not list %s", m)
	}
}
