package sidecar

import (
	"crypto/tls"
	"errors"
	"net/http"

	"github.com/retrydev/retry-operator/internal/sidecar/config"
	"github.com/retrydev/retry-operator/internal/sidecar/h1client"
	"github.com/retrydev/retry-operator/pkg/retrypolicy/retryhttp"
)

// originator is the Inner of every listener's retryhttp.Transport (built by
// upstreamStack.proxy): every attempt of an http:// request whose upstream has
// tls goes out over TLS (RoundTripTLS), everything else as it is. routing is
// the listener's, so the policy whose tls applies is the one that routed the
// request. It is looked up in the configuration in force at each attempt:
// after a reload an attempt goes out as the new configuration says.
type originator struct {
	h1       *h1client.Transport
	reloader *config.Reloader
	routing  routing
}

func (o originator) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Scheme == "http" {
		if u := tlsUpstream(o.reloader, o.routing, req); u != nil {
			return o.h1.RoundTripTLS(req, u.Origin(o.routing.authority(req), req.URL.Host))
		}
	}
	return o.h1.RoundTrip(req)
}

// tlsUpstream is the TLS origination of the request's upstream, as rt names
// it, in the configuration in force, or nil (one load: policy and origination
// agree).
func tlsUpstream(r *config.Reloader, rt routing, req *http.Request) *config.TLSUpstream {
	c := r.Current()
	if c == nil || len(c.TLS) == 0 {
		return nil
	}
	p := rt.match(c, req)
	if p == nil {
		return nil
	}
	return c.TLS[p]
}

func (o originator) CloseIdleConnections() { o.h1.CloseIdleConnections() }

// untrustedReason is the body line of a 502 for a certificate that did not
// verify: Go's verification message (the names the certificate is valid for,
// an unknown authority, an expiry), which holds nothing secret.
func untrustedReason(err error) string {
	var cv *tls.CertificateVerificationError
	if errors.As(err, &cv) && cv.Err != nil {
		return cv.Err.Error()
	}
	return retryhttp.ErrUntrustedCertificate.Error()
}
