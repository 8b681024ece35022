package main

import (
	"slices"
	"strings"
	"testing"
)

// TestSidecarImagePullSecretsFlag: --sidecar-image-pull-secrets becomes the
// injector's list of pull secrets, and a name that cannot be a Secret's is
// refused naming the flag.
func TestSidecarImagePullSecretsFlag(t *testing.T) {
	tests := map[string]struct {
		flag    string
		want    []string
		wantErr string
	}{
		"empty adds none":                            {flag: "", want: nil},
		"names are split on commas and trimmed":      {flag: "registry-a, registry-b ,", want: []string{"registry-a", "registry-b"}},
		"an upper-case name is not a Secret's":       {flag: "Registry", wantErr: `--sidecar-image-pull-secrets: "Registry" is not a Secret name`},
		"a name with a slash is not a Secret's name": {flag: "ns/registry", wantErr: `--sidecar-image-pull-secrets: "ns/registry" is not a Secret name`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			o := options{sidecarImage: "retry.dev/retry-sidecar:dev", sidecarPullSecrets: tc.flag}
			cfg, err := o.injectConfig()
			if tc.wantErr != "" {
				if err == nil || !strings.HasPrefix(err.Error(), tc.wantErr) {
					t.Fatalf("injectConfig() error = %v, want one starting %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(cfg.ImagePullSecrets, tc.want) {
				t.Errorf("ImagePullSecrets = %q, want %q", cfg.ImagePullSecrets, tc.want)
			}
		})
	}
}
