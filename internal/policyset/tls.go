package policyset

import (
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/retrydev/retry-operator/api/v1alpha1"
)

// CALookup returns the ca.crt value of the ConfigMap name in the policy's
// namespace: found is false when the ConfigMap does not exist, hasKey false when
// it exists without the key.
type CALookup func(name string) (value string, found, hasKey bool)

// MapLookup is the CALookup of ConfigMap data held in a map: the ConfigMap name
// is configMaps[prefix+name] (a prefix such as "namespace/" when the map holds
// several namespaces).
func MapLookup(configMaps map[string]map[string]string, prefix string) CALookup {
	return func(name string) (string, bool, bool) {
		data, found := configMaps[prefix+name]
		v, hasKey := data[v1alpha1.CACertificateKey]
		return v, found, hasKey
	}
}

// ResolveCABundles resolves every tls.caCertificateRefs of p (docs/tls.md): the
// result has one entry per upstream, the PEM certificates of its referenced
// ConfigMaps concatenated in the order of the refs ("" for an upstream without
// refs). A missing ConfigMap, a missing key ca.crt or a value without a PEM
// certificate is an error naming the ref's field path, for example
//
//	spec.upstreams[0].tls.caCertificateRefs[1].name: Not found: "partner-ca": ConfigMap shop/partner-ca does not exist
//
// The manager resolves against its cache, the standalone sidecar against the
// ConfigMap documents of its --policy-file inputs; both use this function.
func ResolveCABundles(p *v1alpha1.RetryPolicy, lookup CALookup) ([]string, field.ErrorList) {
	var errs field.ErrorList
	out := make([]string, len(p.Spec.Upstreams))
	for i, u := range p.Spec.Upstreams {
		if u.TLS == nil || len(u.TLS.CACertificateRefs) == 0 {
			continue
		}
		var b strings.Builder
		for j, ref := range u.TLS.CACertificateRefs {
			fp := field.NewPath("spec", "upstreams").Index(i).Child("tls", "caCertificateRefs").Index(j).Child("name")
			val, found, hasKey := lookup(ref.Name)
			switch {
			case !found:
				errs = append(errs, field.NotFound(fp, ref.Name))
				errs[len(errs)-1].Detail = fmt.Sprintf("ConfigMap %s/%s does not exist", p.Namespace, ref.Name)
			case !hasKey:
				errs = append(errs, field.Invalid(fp, ref.Name, fmt.Sprintf("ConfigMap %s/%s has no key %s", p.Namespace, ref.Name, v1alpha1.CACertificateKey)))
			case len(val) > v1alpha1.MaxCACertificateBytes:
				errs = append(errs, field.Invalid(fp, ref.Name, fmt.Sprintf("key %s of ConfigMap %s/%s is over %d bytes, the most a CA bundle may hold",
					v1alpha1.CACertificateKey, p.Namespace, ref.Name, v1alpha1.MaxCACertificateBytes)))
			default:
				pemText, n := certificatesPEM(val)
				if n == 0 {
					errs = append(errs, field.Invalid(fp, ref.Name, fmt.Sprintf("key %s of ConfigMap %s/%s holds no PEM CERTIFICATE that parses", v1alpha1.CACertificateKey, p.Namespace, ref.Name)))
					continue
				}
				b.WriteString(pemText)
			}
		}
		out[i] = b.String()
	}
	return out, errs
}

// certificatesPEM returns the CERTIFICATE blocks of s that parse as X.509,
// re-encoded (comments and other block types dropped), and how many there are.
func certificatesPEM(s string) (string, int) {
	rest := []byte(s)
	var b strings.Builder
	n := 0
	for {
		var blk *pem.Block
		blk, rest = pem.Decode(rest)
		if blk == nil {
			return b.String(), n
		}
		if blk.Type != "CERTIFICATE" {
			continue
		}
		if _, err := x509.ParseCertificate(blk.Bytes); err != nil {
			continue
		}
		b.Write(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: blk.Bytes}))
		n++
	}
}

// CertPool builds the verification roots of a rendered upstream's caBundle; nil
// (with no error) when the bundle is empty, which means the system roots.
func CertPool(bundle string) (*x509.CertPool, error) {
	if bundle == "" {
		return nil, nil
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM([]byte(bundle)) {
		return nil, fmt.Errorf("caBundle: no PEM certificate")
	}
	return pool, nil
}
