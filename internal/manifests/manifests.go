// Package manifests reads rendered Kubernetes manifests (the output of
// kustomize and of helm template): multi-document YAML into objects, and the
// kind/namespace/name an object is identified by. hack/chartfiles and the
// tests of dist/ read the release artefacts through it.
package manifests

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// Key identifies an object of a rendering: two renderings hold the same
// objects when they hold the same keys.
type Key struct {
	Kind, Namespace, Name string
}

// String is kind/namespace/name, or kind/name for a cluster-scoped object.
func (k Key) String() string {
	if k.Namespace == "" {
		return k.Kind + "/" + k.Name
	}
	return k.Kind + "/" + k.Namespace + "/" + k.Name
}

// KeyOf is o's key.
func KeyOf(o *unstructured.Unstructured) Key {
	return Key{Kind: o.GetKind(), Namespace: o.GetNamespace(), Name: o.GetName()}
}

// Parse reads every object of a multi-document YAML stream; documents that
// hold only comments are skipped, one that is not an object is an error.
func Parse(data []byte) ([]*unstructured.Unstructured, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var objs []*unstructured.Unstructured
	for i := 0; ; i++ {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return objs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		var m map[string]any
		if err := yaml.Unmarshal(doc, &m); err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		if len(m) == 0 {
			continue
		}
		o := &unstructured.Unstructured{Object: m}
		if o.GetKind() == "" || o.GetName() == "" {
			return nil, fmt.Errorf("document %d: not an object with a kind and a name", i)
		}
		objs = append(objs, o)
	}
}

// Keys are the keys of objs, in order.
func Keys(objs []*unstructured.Unstructured) []Key {
	keys := make([]Key, len(objs))
	for i, o := range objs {
		keys[i] = KeyOf(o)
	}
	return keys
}
