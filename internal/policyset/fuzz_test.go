package policyset

import (
	"bytes"
	"testing"
)

// FuzzUnmarshal: any input either is refused or decodes to a document whose
// encoding is stable (encode → decode → encode gives the same bytes).
func FuzzUnmarshal(f *testing.F) {
	f.Add([]byte(`{"version":1,"policies":[]}`))
	f.Add([]byte(`{"version":1,"policies":[{"namespace":"shop","name":"p","generation":2,"upstreams":[{"name":"u","hosts":["a.svc"],"maxAttempts":3,"deadline":"10s"}]}]}`))
	f.Add([]byte(`{"version":2}`))
	f.Add([]byte(`{`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, data []byte) {
		doc, err := Unmarshal(data)
		if err != nil {
			return
		}
		first, err := Marshal(doc)
		if err != nil {
			return // a document that cannot be encoded again is refused at render time
		}
		again, err := Unmarshal(first)
		if err != nil {
			t.Fatalf("re-decoding our own encoding failed: %v\n%s", err, first)
		}
		second, err := Marshal(again)
		if err != nil || !bytes.Equal(first, second) {
			t.Fatalf("encoding is not stable:\n%s\n%s (%v)", first, second, err)
		}
	})
}
