package v1alpha1

import (
	"errors"
	"fmt"
	"reflect"
	"strings"

	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// DecodeStrict decodes one YAML (or JSON) document into obj, a pointer, as
// the API server does under strict field validation: field names are
// case-sensitive, and an unknown or duplicate field is an error naming its
// path, with the nearest field of that object when one is close, else the
// fields it has. Every reader of policy files uses it (docs/policy.md):
//
//	spec.upstreams[0].maxAtempts: unknown field; did you mean maxAttempts?
//	spec.upstreams[0].colour: unknown field; the fields here are name, hosts, …
func DecodeStrict(data []byte, obj any) error {
	j, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return fmt.Errorf("error converting YAML to JSON: %w", err)
	}
	strict, err := kjson.UnmarshalStrict(j, obj, kjson.DisallowUnknownFields, kjson.DisallowDuplicateFields)
	if err != nil {
		return err
	}
	if len(strict) == 0 {
		return nil
	}
	msgs := make([]string, 0, len(strict))
	for _, e := range strict {
		msgs = append(msgs, explainStrict(e, reflect.TypeOf(obj)))
	}
	return errors.New(strings.Join(msgs, "; "))
}

// explainStrict turns one strict decoding error of sigs.k8s.io/json
// (`unknown field "a.b[0].c"`) into "a.b[0].c: unknown field; did you mean …".
func explainStrict(e error, t reflect.Type) string {
	fp, ok := e.(interface{ FieldPath() string })
	if !ok {
		return e.Error()
	}
	path := fp.FieldPath()
	if strings.HasPrefix(e.Error(), "duplicate field") {
		return path + ": duplicate field"
	}
	msg := path + ": unknown field"
	segs := strings.Split(path, ".")
	known, ok := fieldsAt(t, segs[:len(segs)-1])
	if !ok || len(known) == 0 {
		return msg
	}
	name := segs[len(segs)-1]
	if near := nearestField(name, known); near != "" {
		return msg + "; did you mean " + near + "?"
	}
	return msg + "; the fields here are " + strings.Join(known, ", ")
}

// fieldsAt follows path (JSON names, "[i]" indexes) from t and returns the
// JSON names of the struct it reaches; ok is false when the path cannot be
// followed (through a map, whose keys may hold dots).
func fieldsAt(t reflect.Type, path []string) (names []string, ok bool) {
	for _, seg := range path {
		seg, _, _ = strings.Cut(seg, "[")
		t = elem(t)
		if t.Kind() != reflect.Struct {
			return nil, false
		}
		f, found := fieldByJSONName(t, seg)
		if !found {
			return nil, false
		}
		t = f
	}
	t = elem(t)
	if t.Kind() != reflect.Struct {
		return nil, false
	}
	return jsonNames(t), true
}

// elem strips pointers, slices and arrays.
func elem(t reflect.Type) reflect.Type {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Array {
		t = t.Elem()
	}
	return t
}

// jsonNames are the JSON names of t's fields, inlined structs flattened, in
// declaration order.
func jsonNames(t reflect.Type) []string {
	var out []string
	for i := range t.NumField() {
		f := t.Field(i)
		name, inline := jsonName(f)
		switch {
		case inline:
			out = append(out, jsonNames(elem(f.Type))...)
		case name != "":
			out = append(out, name)
		}
	}
	return out
}

// fieldByJSONName is the type of t's field named name in JSON.
func fieldByJSONName(t reflect.Type, name string) (reflect.Type, bool) {
	for i := range t.NumField() {
		f := t.Field(i)
		n, inline := jsonName(f)
		if inline {
			if ft, ok := fieldByJSONName(elem(f.Type), name); ok {
				return ft, true
			}
		} else if n == name {
			return f.Type, true
		}
	}
	return nil, false
}

// jsonName is f's JSON name; inline is true for an embedded struct without
// a name (its fields are the parent's), name "" for a field JSON skips.
func jsonName(f reflect.StructField) (name string, inline bool) {
	tag := f.Tag.Get("json")
	if tag == "-" || (!f.IsExported() && !f.Anonymous) {
		return "", false
	}
	name, _, _ = strings.Cut(tag, ",")
	if name == "" && f.Anonymous && elem(f.Type).Kind() == reflect.Struct {
		return "", true
	}
	if name == "" {
		name = f.Name
	}
	return name, false
}

// nearestField is the field of known closest to name: the same but for case,
// or at most two edits away (a letter missing, doubled or swapped); "" when
// none is.
func nearestField(name string, known []string) string {
	best, bestDist := "", 3
	for _, k := range known {
		if strings.EqualFold(k, name) {
			return k
		}
		if d := editDistance(strings.ToLower(name), strings.ToLower(k)); d < bestDist {
			best, bestDist = k, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b, in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
