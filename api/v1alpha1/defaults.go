/*
Copyright 2026.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package v1alpha1

import (
	"bytes"
	"encoding/json"
)

// Default values, identical to the +kubebuilder:default markers, for code
// that needs one by name. SetDefaults does not use them: it applies the
// markers themselves (zz_generated.defaults.go, read from the CRD by make
// manifests), so a new default is a marker only. TestDefaultConstantsAreTheMarkers
// holds these to the markers.
const (
	DefaultMaxAttempts         int32    = 3
	DefaultDeadline            Duration = "10s"
	DefaultBackoffBase         Duration = "100ms"
	DefaultBackoffMax          Duration = "10s"
	DefaultJitter              Jitter   = JitterFull
	DefaultConnectFailure               = true
	DefaultMaxReplayBodyBytes  int64    = 65536
	DefaultRetryAfterMaxWait   Duration = "30s"
	DefaultRetryAfterSpread    Duration = "1s"
	DefaultRetryPercent        int32    = 20
	DefaultMinRetriesPerSecond int32    = 10
	DefaultBurst               int32    = 1
	DefaultMaxQueued           int32    = 0
	DefaultQueueTimeout        Duration = "1s"
	DefaultRateLimitHeaders             = false
	DefaultHoldOnDeferral               = false
)

// DefaultStatusCodes and DefaultReplayableMethods are the list defaults.
var (
	DefaultStatusCodes       = []StatusCode{429, 503}
	DefaultReplayableMethods = []string{"GET", "HEAD", "OPTIONS"}
)

// SetDefaults fills every absent optional field of p with its default, in place,
// exactly as the API server's structural defaulting does: it applies the CRD's
// own defaults (upstreamDefaults), top-down, so a defaulted object gets the
// defaults of its fields too. It is for where no API server is involved (a
// policy file given to the sidecar, a rendering).
func SetDefaults(p *RetryPolicy) {
	for i := range p.Spec.Upstreams {
		setUpstreamDefaults(&p.Spec.Upstreams[i])
	}
}

// defaultsTree is upstreamDefaults decoded: "default", "properties", "items".
var defaultsTree = func() map[string]any {
	var t map[string]any
	if err := json.Unmarshal([]byte(upstreamDefaults), &t); err != nil {
		panic("v1alpha1: zz_generated.defaults.go: " + err.Error())
	}
	return t
}()

// setUpstreamDefaults round-trips u through its JSON form, the form the
// schema's defaults are written in. An Upstream always encodes and decodes.
func setUpstreamDefaults(u *Upstream) {
	data, err := json.Marshal(u)
	if err != nil {
		panic("v1alpha1: encoding an Upstream: " + err.Error())
	}
	var obj map[string]any
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber() // an int64 beyond 2^53 stays exact, for the validation message
	if err := dec.Decode(&obj); err != nil {
		panic("v1alpha1: decoding an Upstream: " + err.Error())
	}
	applyDefaults(obj, defaultsTree)
	if data, err = json.Marshal(obj); err != nil {
		panic("v1alpha1: encoding a defaulted Upstream: " + err.Error())
	}
	var out Upstream
	if err := json.Unmarshal(data, &out); err != nil {
		panic("v1alpha1: decoding a defaulted Upstream: " + err.Error())
	}
	*u = out
}

// applyDefaults sets each absent property of obj that has a default in
// schema, then descends into objects and list items.
func applyDefaults(obj map[string]any, schema map[string]any) {
	props, _ := schema["properties"].(map[string]any)
	for name, s := range props {
		ps := s.(map[string]any)
		if _, present := obj[name]; !present {
			if d, ok := ps["default"]; ok {
				obj[name] = deepCopyJSON(d)
			}
		}
		switch v := obj[name].(type) {
		case map[string]any:
			applyDefaults(v, ps)
		case []any:
			if items, ok := ps["items"].(map[string]any); ok {
				for _, it := range v {
					if m, ok := it.(map[string]any); ok {
						applyDefaults(m, items)
					}
				}
			}
		}
	}
}

// deepCopyJSON copies a decoded JSON value, so no two objects share a default.
func deepCopyJSON(v any) any {
	switch v := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, x := range v {
			out[k] = deepCopyJSON(x)
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, x := range v {
			out[i] = deepCopyJSON(x)
		}
		return out
	}
	return v
}
