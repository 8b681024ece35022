package config

import (
	"fmt"
	"testing"
)

func TestChoose(t *testing.T) {
	doc := func(source string, rev int64) *delivery {
		return &delivery{source: source, data: fmt.Appendf(nil, `{"version":1,"revision":%d,"policies":[]}`, rev)}
	}
	absent := func(source string) *delivery { return &delivery{source: source} }
	garbage := func(source string) *delivery { return &delivery{source: source, data: []byte(`{"version":`)} }
	type want struct {
		source string
		rev    int64 // -1: no document
		ok     bool
	}
	tests := map[string]struct {
		file, api *delivery
		inForce   int64
		want      want
	}{
		"an edit arrives through the watch before the file":      {file: doc("file", 7), api: doc("api", 8), inForce: 7, want: want{"api", 8, true}},
		"a newer file wins over a watch that is stuck":           {file: doc("file", 9), api: doc("api", 8), inForce: 7, want: want{"file", 9, true}},
		"the API wins a tie":                                     {file: doc("file", 8), api: doc("api", 8), inForce: 7, want: want{"api", 8, true}},
		"the API says the ConfigMap is gone":                     {file: doc("file", 7), api: absent("api"), inForce: 7, want: want{"api", -1, true}},
		"a stale file never brings back a deleted ConfigMap":     {file: doc("file", 7), api: absent("api"), inForce: 7, want: want{"api", -1, true}},
		"an older file is refused while the API is not running":  {file: doc("file", 6), inForce: 7, want: want{"", 0, false}},
		"an older API document is refused too":                   {file: doc("file", 6), api: doc("api", 6), inForce: 7, want: want{"", 0, false}},
		"the same revision is applied again (labels may change)": {file: doc("file", 7), inForce: 7, want: want{"file", 7, true}},
		"without the API a missing file means no policies":       {file: absent("file"), inForce: 7, want: want{"file", -1, true}},
		"garbage from the API is handed on to be refused":        {file: doc("file", 7), api: garbage("api"), inForce: 7, want: want{"api", -1, true}},
		"garbage does not hide a newer file":                     {file: doc("file", 8), api: garbage("api"), inForce: 7, want: want{"file", 8, true}},
		"the first load takes whatever the file has":             {file: doc("file", 0), inForce: 0, want: want{"file", 0, true}},
		"the first load takes the API's newer document":          {file: absent("file"), api: doc("api", 3), inForce: 0, want: want{"api", 3, true}},
		"with neither source there is nothing to choose":         {inForce: 0, want: want{"", 0, false}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, ok := choose(tc.file, tc.api, tc.inForce)
			rev, readable := got.revision()
			if !readable {
				rev = -1
			}
			if !ok {
				got.source, rev = "", 0
			}
			if g := (want{got.source, rev, ok}); g != tc.want {
				t.Fatalf("choose = %+v, want %+v", g, tc.want)
			}
		})
	}
}
