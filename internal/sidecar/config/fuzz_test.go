package config

import (
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// FuzzParseLabels: any input is refused or gives labels that, written back the
// way the kubelet writes them, parse to the same map.
func FuzzParseLabels(f *testing.F) {
	f.Add([]byte("app=\"checkout\"\nretry.dev/inject=\"true\"\n"))
	f.Add([]byte(""))
	f.Add([]byte("\n\n"))
	f.Add([]byte("a=\"b\\\"c\""))
	f.Add([]byte("broken"))
	f.Add([]byte("k=unquoted"))
	f.Fuzz(func(t *testing.T, data []byte) {
		labels, err := parseLabels(data)
		if err != nil {
			return
		}
		var b strings.Builder
		for _, k := range slices.Sorted(maps.Keys(labels)) {
			b.WriteString(k + "=" + strconv.Quote(labels[k]) + "\n")
		}
		again, err := parseLabels([]byte(b.String()))
		if err != nil || !maps.Equal(labels, again) {
			t.Fatalf("round trip of %q: %v, %v (%v)", data, labels, again, err)
		}
	})
}
