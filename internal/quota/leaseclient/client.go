// Package leaseclient is the quota.Store of a sidecar in a cluster: each
// lease operation is one POST to the manager's lease endpoint
// (internal/quota/leaseserver, docs/quota.md#trust), authenticated with the
// pod's projected service-account token. The sidecar holds no credential of
// the store.
//
// The endpoint's answers map onto the quota client's states:
//
//	200            the reply
//	401, 403       quota.ErrRevoked: denied at once, whatever onStoreLoss says;
//	               the endpoint is asked again at most once per RevokedRetry
//	429            quota.ErrLate: a late lease, nothing lost
//	anything else  an error: the store is lost, onStoreLoss applies
//	(503, 400, no connection, a certificate that does not verify)
package leaseclient

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/retrydev/retry-operator/api/v1alpha1"
	"github.com/retrydev/retry-operator/internal/quota"
)

// Options say where the endpoint is and how to authenticate to it: the
// lease entry of a quota in policies.json (policyset.QuotaLease).
type Options struct {
	// URL is https://<host>:<port>; the server's certificate must name host.
	URL string
	// Address, when set, is the host:port dialled instead of resolving URL's host.
	Address string
	// CABundle is the PEM of the CAs the certificate may chain to; empty:
	// the system roots.
	CABundle []byte
	// TokenFile holds the pod's projected token; it is read again every
	// TokenReread and after a 401, so the kubelet's rotation is followed.
	TokenFile string
}

// Timings of the client.
const (
	// RevokedRetry is the least time between two calls of a revoked client:
	// a namespace left out of the consumers does not hammer the endpoint.
	RevokedRetry = time.Second
	// TokenReread is how often the token file is read again.
	TokenReread = 10 * time.Second
	// ConnectTimeout bounds a dial and TLS handshake to the endpoint. It is
	// longer than a lease may take (quota.StoreTimeout): the transport
	// finishes a connection whose lease gave up and keeps it for the next.
	// Cut at the lease's timeout, a handshake slower than a lease (a loaded
	// machine) was started again by every lease and never finished: 50
	// sidecars on 2 busy CPUs abandoned 7,678 handshakes in 20 s and leased
	// almost nothing (docs/performance.md#shared-quota).
	ConnectTimeout = 2 * time.Second
	// maxReply bounds the body read of an answer.
	maxReply = 4 << 10
	// maxToken bounds the token file read.
	maxToken = 16 << 10
)

// Store is a quota.Store over the lease endpoint. Safe for concurrent use.
type Store struct {
	base   string
	client *http.Client
	token  tokenFile
	now    func() time.Time
	// revokedUntil is the Unix ns before which Lease answers ErrRevoked
	// without calling.
	revokedUntil atomic.Int64
}

var _ quota.Store = (*Store)(nil)

// New returns a store over the endpoint of o. Nothing is dialled until the
// first lease operation.
func New(o Options) (*Store, error) {
	u, err := url.Parse(o.URL)
	if err != nil || u.Scheme != "https" || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" {
		return nil, fmt.Errorf("lease endpoint %q: not an https://<host>:<port> URL", o.URL)
	}
	if o.TokenFile == "" {
		return nil, errors.New("lease endpoint: no token file")
	}
	tr, err := transportFor(u.Hostname(), o.Address, o.CABundle)
	if err != nil {
		return nil, err
	}
	return &Store{base: "https://" + u.Host, client: &http.Client{Transport: tr},
		token: tokenFile{path: o.TokenFile}, now: time.Now}, nil
}

// Lease implements quota.Store.
func (s *Store) Lease(ctx context.Context, spec quota.Spec, req quota.LeaseRequest) (quota.LeaseReply, error) {
	now := s.now()
	if until := s.revokedUntil.Load(); now.UnixNano() < until {
		return quota.LeaseReply{}, fmt.Errorf("%w (asked again at most every %s)", quota.ErrRevoked, RevokedRetry)
	}
	token, err := s.token.read(now)
	if err != nil {
		return quota.LeaseReply{}, err
	}
	body, err := json.Marshal(req)
	if err != nil {
		return quota.LeaseReply{}, err
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, s.base+v1alpha1.QuotaLeasePath(spec.Name), bytes.NewReader(body))
	if err != nil {
		return quota.LeaseReply{}, err
	}
	hreq.Header.Set("Authorization", "Bearer "+token)
	hreq.Header.Set("Content-Type", "application/json")
	resp, err := s.client.Do(hreq)
	if err != nil {
		return quota.LeaseReply{}, fmt.Errorf("lease endpoint: %w", err)
	}
	defer func() {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxReply))
		resp.Body.Close()
	}()
	return s.answer(now, resp)
}

// answer reads the endpoint's answer (the package's table).
func (s *Store) answer(now time.Time, resp *http.Response) (quota.LeaseReply, error) {
	switch resp.StatusCode {
	case http.StatusOK:
		var reply quota.LeaseReply
		if err := json.NewDecoder(io.LimitReader(resp.Body, maxReply)).Decode(&reply); err != nil {
			return quota.LeaseReply{}, fmt.Errorf("lease endpoint: a reply that does not decode: %w", err)
		}
		return reply, nil
	case http.StatusUnauthorized, http.StatusForbidden:
		if resp.StatusCode == http.StatusUnauthorized {
			s.token.expire() // perhaps rotated under us: read it again
		}
		s.revokedUntil.Store(now.Add(RevokedRetry).UnixNano())
		return quota.LeaseReply{}, fmt.Errorf("%w: the lease endpoint answered %d", quota.ErrRevoked, resp.StatusCode)
	case http.StatusTooManyRequests:
		return quota.LeaseReply{}, fmt.Errorf("%w: the lease endpoint answered 429", quota.ErrLate)
	}
	return quota.LeaseReply{}, fmt.Errorf("lease endpoint answered %d", resp.StatusCode)
}

// tokenFile is the projected token, read again every TokenReread.
type tokenFile struct {
	path   string
	mu     sync.Mutex
	token  string
	readAt time.Time
}

func (t *tokenFile) read(now time.Time) (string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.token != "" && now.Sub(t.readAt) < TokenReread && !now.Before(t.readAt) {
		return t.token, nil
	}
	f, err := os.Open(t.path)
	if err != nil {
		return "", fmt.Errorf("lease endpoint token: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxToken))
	if err != nil {
		return "", fmt.Errorf("lease endpoint token: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("lease endpoint token: %s is empty", t.path)
	}
	t.token, t.readAt = tok, now
	return tok, nil
}

func (t *tokenFile) expire() {
	t.mu.Lock()
	t.readAt = time.Time{}
	t.mu.Unlock()
}

// transports are shared by every Store of one endpoint: a sidecar keeps one
// connection pool to the manager whatever the number of its quotas.
var transports sync.Map // transportKey -> *http.Transport

type transportKey struct {
	host, address string
	ca            [sha256.Size]byte
}

// transportFor is the transport to the endpoint whose certificate names host,
// dialled at address (or host's), trusting caBundle.
func transportFor(host, address string, caBundle []byte) (*http.Transport, error) {
	key := transportKey{host: host, address: address, ca: sha256.Sum256(caBundle)}
	if tr, ok := transports.Load(key); ok {
		return tr.(*http.Transport), nil
	}
	cfg := &tls.Config{ServerName: host, MinVersion: tls.VersionTLS12}
	if len(caBundle) > 0 {
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(caBundle) {
			return nil, errors.New("lease endpoint: the CA bundle holds no PEM certificate")
		}
	}
	dialer := &net.Dialer{Timeout: ConnectTimeout, KeepAlive: 30 * time.Second}
	tr := &http.Transport{
		TLSClientConfig:     cfg,
		TLSHandshakeTimeout: ConnectTimeout,
		MaxIdleConnsPerHost: 4,
		IdleConnTimeout:     90 * time.Second,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if address != "" {
				addr = address
			}
			return dialer.DialContext(ctx, network, addr)
		},
		Proxy: nil, // the sidecar's own environment names no proxy for the manager
	}
	actual, _ := transports.LoadOrStore(key, tr)
	return actual.(*http.Transport), nil
}
