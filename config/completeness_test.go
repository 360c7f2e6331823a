package config

import (
	"os"
	"reflect"
	"slices"
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

// TestConfigYAMLIsTheDefaults: config.yaml, as shipped, is what holdfast
// runs with when a setting is left out, but for its example user.
func TestConfigYAMLIsTheDefaults(t *testing.T) {
	b, err := os.ReadFile("../config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	shipped, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	def := Default()
	if len(shipped.Users) != 1 || shipped.Users[0].Name != "app" {
		t.Fatalf("config.yaml's users: %+v; want the one example user app", shipped.Users)
	}
	shipped.Users = def.Users
	// Zero settings of these mean their defaults; empty lists are nil.
	for _, c := range []*Config{&shipped, &def} {
		r := &c.Reservation
		r.Redis = r.Redis.WithDefaults(r.Retention)
		r.Refiller = r.Refiller.WithDefaults()
		if len(r.Redis.Shops) == 0 {
			r.Redis.Shops = nil
		}
		if len(c.Tags.Drained) == 0 {
			c.Tags.Drained = nil
		}
		if len(c.Tags.Limits) == 0 {
			c.Tags.Limits = nil
		}
		if len(c.Overload.Classes) == 0 {
			c.Overload.Classes = nil
		}
		if len(c.Tags.MaxTransactionTime) == 0 {
			c.Tags.MaxTransactionTime = nil
		}
		if len(c.Backend.Replicas) == 0 {
			c.Backend.Replicas = nil
		}
		if len(c.Routing.Tags) == 0 {
			c.Routing.Tags = nil
		}
		if len(c.Auth.FromBackend.Tags) == 0 {
			c.Auth.FromBackend.Tags = nil
		}
		if len(c.Admin.Credentials) == 0 {
			c.Admin.Credentials = nil
		}
	}
	if !reflect.DeepEqual(shipped, def) {
		sv, dv := reflect.ValueOf(shipped), reflect.ValueOf(def)
		for i := range sv.NumField() {
			if !reflect.DeepEqual(sv.Field(i).Interface(), dv.Field(i).Interface()) {
				t.Errorf("%s: config.yaml has %+v, the default is %+v", sv.Type().Field(i).Name, sv.Field(i).Interface(), dv.Field(i).Interface())
			}
		}
	}
}

// TestEveryKnobHasOneDefault: each section's defaults are written once, in
// its Default function, and WithDefaults fills a zero knob from there;
// every knob has a default but those whose zero is the documented default
// (a switch that is off, no Redis, an empty list).
func TestEveryKnobHasOneDefault(t *testing.T) {
	for _, tc := range []struct {
		name   string
		def    any
		filled any      // the zero section (but fields taken literally) with defaults filled in
		zeroOK []string // knobs whose default is zero
	}{
		{"reservation", DefaultEngine(), func() any {
			d := DefaultEngine()
			return Engine{PaymentTimeout: d.PaymentTimeout, CallbackRetryWindow: d.CallbackRetryWindow,
				ClockSkew: d.ClockSkew, DefaultTTL: d.DefaultTTL}.WithDefaults()
		}(), []string{"DisableCoalescing", "DisableSessions", "DisableOneTrip"}},
		{"reservation.refiller", DefaultRefiller(), Refiller{}.WithDefaults(), nil},
		{"reservation.redis", DefaultRedis(), Redis{}.WithDefaults(0),
			[]string{"Address", "Password", "DB", "Shops", "Percent", "RecordRetention"}},
	} {
		if !reflect.DeepEqual(tc.def, tc.filled) {
			t.Errorf("%s: WithDefaults of the zero section is %+v, the defaults are %+v", tc.name, tc.filled, tc.def)
		}
		v := reflect.ValueOf(tc.def)
		for i := range v.NumField() {
			name := v.Type().Field(i).Name
			if v.Field(i).IsZero() && !slices.Contains(tc.zeroOK, name) {
				t.Errorf("%s: %s has no default", tc.name, name)
			}
		}
	}
}
