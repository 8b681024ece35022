package interception

import (
	"slices"
	"testing"
)

func TestParsePorts(t *testing.T) {
	tests := map[string]struct {
		in      string
		want    []uint16
		wantErr string
	}{
		"the default":                  {in: "80", want: []uint16{80}},
		"two ports with spaces":        {in: "80, 8080", want: []uint16{80, 8080}},
		"443 is refused with the why":  {in: "80,443", wantErr: "443 is never intercepted: TLS cannot be retried from outside the stream; call the upstream with an http:// URL and let the sidecar originate TLS (docs/clients.md)"},
		"a name is not a port":         {in: "http", wantErr: `"http" is not a port: want comma-separated ports 1-65535 such as 80,8080`},
		"zero is not a port":           {in: "0", wantErr: `"0" is not a port: want comma-separated ports 1-65535 such as 80,8080`},
		"above 65535 is not a port":    {in: "65536", wantErr: `"65536" is not a port: want comma-separated ports 1-65535 such as 80,8080`},
		"empty":                        {in: "", wantErr: `"" is not a port: want comma-separated ports 1-65535 such as 80,8080`},
		"a trailing comma":             {in: "80,", wantErr: `"" is not a port: want comma-separated ports 1-65535 such as 80,8080`},
		"a duplicate":                  {in: "80,8080,80", wantErr: "port 80 is listed twice"},
		"a sign is not a decimal port": {in: "+80", wantErr: `"+80" is not a port: want comma-separated ports 1-65535 such as 80,8080`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := ParsePorts(tc.in)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("ParsePorts(%q) error = %v, want %q", tc.in, err, tc.wantErr)
				}
				return
			}
			if err != nil || !slices.Equal(got, tc.want) {
				t.Fatalf("ParsePorts(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	tests := map[string]struct {
		r       Rules
		wantErr string
	}{
		"the injector's rules":   {r: Rules{Ports: []uint16{80, 8080}, To: 15006, ExcludeUID: 65532}},
		"no ports":               {r: Rules{To: 15006, ExcludeUID: 65532}, wantErr: "--ports: at least one port is needed"},
		"no target port":         {r: Rules{Ports: []uint16{80}, ExcludeUID: 65532}, wantErr: "--to: the sidecar's transparent listener port is needed (1-65535)"},
		"the target intercepted": {r: Rules{Ports: []uint16{80, 15006}, To: 15006, ExcludeUID: 65532}, wantErr: "--ports: 15006 is the --to port itself; redirecting it would loop"},
		"root excluded":          {r: Rules{Ports: []uint16{80}, To: 15006}, wantErr: "--exclude-uid: the sidecar's non-zero UID is needed, or its own upstream calls would be redirected back to it"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			err := tc.r.Validate()
			if (err == nil) != (tc.wantErr == "") || (err != nil && err.Error() != tc.wantErr) {
				t.Fatalf("Validate() = %v, want %q", err, tc.wantErr)
			}
		})
	}
}

func TestString(t *testing.T) {
	r := Rules{Ports: []uint16{80, 8080}, To: 15006, ExcludeUID: 65532}
	want := "table ip retry_sidecar { chain output { type nat hook output priority dstnat; meta skuid 65532 return; tcp dport 80 redirect to :15006; tcp dport 8080 redirect to :15006; } }"
	if got := r.String(); got != want {
		t.Fatalf("String() =\n%s\nwant\n%s", got, want)
	}
}
