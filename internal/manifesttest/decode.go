package manifesttest

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"regexp"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// kinds are the API types a manifest may be, by apiVersion and kind.
var kinds = map[metav1.TypeMeta]reflect.Type{
	{APIVersion: "v1", Kind: "ConfigMap"}:                  reflect.TypeFor[corev1.ConfigMap](),
	{APIVersion: "v1", Kind: "Secret"}:                     reflect.TypeFor[corev1.Secret](),
	{APIVersion: "v1", Kind: "Service"}:                    reflect.TypeFor[corev1.Service](),
	{APIVersion: "apps/v1", Kind: "Deployment"}:            reflect.TypeFor[appsv1.Deployment](),
	{APIVersion: "apps/v1", Kind: "StatefulSet"}:           reflect.TypeFor[appsv1.StatefulSet](),
	{APIVersion: "batch/v1", Kind: "Job"}:                  reflect.TypeFor[batchv1.Job](),
	{APIVersion: "policy/v1", Kind: "PodDisruptionBudget"}: reflect.TypeFor[policyv1.PodDisruptionBudget](),
}

// Object is one decoded manifest: a pointer to its API type.
type Object struct {
	Where string // file:document
	Kind  string
	Name  string
	Value any
}

// docSeparator splits a YAML stream into its documents.
var docSeparator = regexp.MustCompile(`(?m)^---[ \t]*$`)

// Decode decodes every document of a manifest file strictly: the YAML has
// no duplicate keys, its apiVersion and kind are one of kinds, and every
// field is a field of that type, spelled as the API spells it.
func Decode(file string, b []byte) ([]Object, error) {
	var out []Object
	for i, doc := range docSeparator.Split(string(b), -1) {
		where := fmt.Sprintf("%s:document %d", file, i+1)
		if len(bytes.TrimSpace(stripComments([]byte(doc)))) == 0 {
			continue
		}
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		t, ok := kinds[tm]
		if !ok {
			return nil, fmt.Errorf("%s: apiVersion %q kind %q is not a kind this test knows", where, tm.APIVersion, tm.Kind)
		}
		v := reflect.New(t).Interface()
		// sigs.k8s.io/yaml: duplicate keys and unknown fields fail (its
		// field names match case-insensitively)...
		if err := yaml.UnmarshalStrict([]byte(doc), v); err != nil {
			return nil, fmt.Errorf("%s: %s: %w", where, tm.Kind, err)
		}
		// ...and as the API server decodes: names match exactly.
		j, err := yaml.YAMLToJSONStrict([]byte(doc))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		strict, err := kjson.UnmarshalStrict(j, reflect.New(t).Interface())
		if err := errors.Join(append(strict, err)...); err != nil {
			return nil, fmt.Errorf("%s: %s: %w", where, tm.Kind, err)
		}
		meta := reflect.ValueOf(v).Elem().FieldByName("ObjectMeta").Interface().(metav1.ObjectMeta)
		if meta.Name == "" {
			return nil, fmt.Errorf("%s: %s has no metadata.name", where, tm.Kind)
		}
		out = append(out, Object{Where: where, Kind: tm.Kind, Name: meta.Name, Value: v})
	}
	return out, nil
}

var comment = regexp.MustCompile(`(?m)^\s*#.*$`)

func stripComments(b []byte) []byte { return comment.ReplaceAll(b, nil) }
