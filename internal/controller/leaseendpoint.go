package controller

import (
	"context"
	"os"
	"time"

	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/retrydev/retry-operator/api/v1alpha1"
	"github.com/retrydev/retry-operator/internal/policyset"
)

// QuotaRecheck is how often a namespace that draws on a SharedQuota is
// rendered again, so that a renewed CA of the lease endpoint's certificate
// reaches its sidecars.
const QuotaRecheck = 30 * time.Second

// maxCABundle bounds the CA file read: a bundle of a few certificates.
const maxCABundle = 64 << 10

// LeaseEndpoint is where the rendered quotas send the sidecars to lease: the
// manager's lease endpoint on the webhook Service (docs/quota.md#trust).
type LeaseEndpoint struct {
	// URL is https://<host>:<port>, the host a name the serving certificate
	// carries.
	URL string
	// Address, when set, is the host:port the sidecars dial instead of
	// resolving URL's host (the Service's cluster IP).
	Address string
	// CAFile is the PEM file of the CA the serving certificate chains to
	// (ca.crt beside it), read at every rendering; "" or missing: the
	// sidecars trust the system roots.
	CAFile string
}

// Rendered is the lease entry of the rendered quotas, with the CA as the
// file holds it now.
func (e LeaseEndpoint) Rendered(ctx context.Context) policyset.QuotaLease {
	l := policyset.QuotaLease{URL: e.URL, Address: e.Address, TokenFile: v1alpha1.QuotaTokenPath}
	if e.CAFile == "" {
		return l
	}
	ca, err := os.ReadFile(e.CAFile)
	switch {
	case err != nil && !os.IsNotExist(err):
		logf.FromContext(ctx).Info("cannot read the lease endpoint's CA; rendering without it", "file", e.CAFile, "error", err.Error())
	case len(ca) > maxCABundle:
		logf.FromContext(ctx).Info("the lease endpoint's CA file is too large; rendering without it", "file", e.CAFile, "bytes", len(ca))
	default:
		l.CABundle = string(ca)
	}
	return l
}
