// Package config is the retry-sidecar's configuration: it reads the policy
// sources (the mounted policies.json, --policy-file, the pod's labels, the
// shared quotas' credentials), compiles them into a Config, keeps the one in
// force in a Reloader, and follows the sources (file watches, and the API
// watch of retry-policies; docs/fleet.md). Package sidecar serves requests
// with what it loads.
package config

import (
	"bufio"
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/retrydev/retry-operator/api/v1alpha1"
	"github.com/retrydev/retry-operator/internal/policyset"
	"github.com/retrydev/retry-operator/pkg/retrypolicy"
)

// Sources are where the sidecar's configuration comes from. Any may be empty;
// with none at all the sidecar is a plain pass-through proxy.
type Sources struct {
	// ConfigDir is the mounted retry-policies ConfigMap: its policies.json. A
	// directory without that file (the ConfigMap volume is optional, so a pod starts
	// before any policy exists) is an empty configuration, not an error.
	ConfigDir string
	// PolicyFiles hold RetryPolicy YAML documents, exactly what a user would
	// kubectl apply (standalone mode).
	PolicyFiles []string
	// PodLabels is the downward API labels file (key="value" lines). Without it,
	// every policy given applies; with it, only those whose podSelector matches.
	PodLabels string
	// QuotaCredentials is --quota-credentials-file: the store credentials of
	// the shared quotas whose rendering names no file of its own (docs/quota.md).
	QuotaCredentials string
	// Namespace is the pod's namespace (POD_NAMESPACE): which Gateway API
	// routes in PolicyFiles apply to it, and by which names
	// (docs/gateway-api.md#hosts). Empty means "default".
	Namespace string
}

// Config is one loaded configuration: immutable once built.
type Config struct {
	Set *retrypolicy.Set
	// Routes are the rules of the Gateway API routes selected for this pod,
	// matched per request where Set has no upstream for the host; nil when
	// there are none (docs/gateway-api.md).
	Routes *policyset.CompiledRoutes
	// Hash is the content hash of the policies (policyset.Hash): with only
	// --config-dir it is the hash of policies.json, the one the manager reports.
	Hash string
	// SHA256 is the full sha256 of the same bytes, hex-encoded.
	SHA256 string
	// Upstreams are the names of the upstreams selected for this pod.
	Upstreams []string
	// Quotas are the names of the shared quotas they draw on.
	Quotas []string
	// TLS holds the TLS origination of the policies that have one.
	TLS map[*retrypolicy.Policy]*TLSUpstream
	// policies names the RetryPolicy (namespace/name) of each upstream name.
	policies map[string]string
	// Revision is the policies.json revision in force (docs/fleet.md): never
	// lower than an earlier configuration's. 0 with policy files only.
	Revision int64
	// Source says where policies.json came from: SourceAPI, SourceFile, or
	// SourcePolicyFile when there is none.
	Source string
	// key identifies every input byte, labels and credentials files included:
	// equal keys, equal config.
	key string
}

// raw is what was read from the sources, before parsing.
type raw struct {
	dir       []byte // policies.json (from source); nil when absent
	source    string // SourceFile, SourceAPI, or "" when dir is not used
	revision  int64  // of dir
	files     [][]byte
	labels    []byte
	hasLabels bool
	creds     []byte // --quota-credentials-file: a new password is a new configuration
	// credFiles are the credentials files the rendering names for the quotas
	// in use, and quotaCreds what they held (readQuotaCreds): a rotated
	// password in the mounted Secret is a new configuration too.
	credFiles  []string
	quotaCreds []byte
}

// readQuotaCreds reads files, the credentials files named by the rendering,
// into r.quotaCreds; a file that cannot be read is marked as such, so that it
// appearing later is a change.
func (r *raw) readQuotaCreds(files []string) {
	r.credFiles = files
	var b bytes.Buffer
	for _, f := range files {
		data, err := os.ReadFile(f)
		fmt.Fprintf(&b, "%d:%s%t%d:", len(f), f, err == nil, len(data))
		b.Write(data)
	}
	r.quotaCreds = b.Bytes()
}

// credentialsFiles are the files named by the renderings of qs, sorted, each once.
func credentialsFiles(qs []policyset.Quota) []string {
	var files []string
	for _, q := range qs {
		if q.Store == nil {
			continue // leases from the manager's endpoint: its token is read by the lease client
		}
		if f := q.Store.Redis.CredentialsFile; f != "" && !slices.Contains(files, f) {
			files = append(files, f)
		}
	}
	slices.Sort(files)
	return files
}

// read reads every source. A missing policies.json is an empty configuration; a
// missing policy or labels file is an error (the user named it).
func (s Sources) read() (raw, error) {
	var r raw
	if s.ConfigDir != "" {
		b, err := os.ReadFile(filepath.Join(s.ConfigDir, v1alpha1.PoliciesConfigMapKey))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return r, fmt.Errorf("--config-dir: %w", err)
		}
		r.dir, r.source = b, SourceFile
		r.revision, _ = policyset.PeekRevision(b)
	}
	for _, f := range s.PolicyFiles {
		b, err := os.ReadFile(f)
		if err != nil {
			return r, fmt.Errorf("--policy-file: %w", err)
		}
		r.files = append(r.files, b)
	}
	if s.QuotaCredentials != "" {
		b, err := os.ReadFile(s.QuotaCredentials)
		if err != nil {
			return r, fmt.Errorf("--quota-credentials-file: %w", err)
		}
		r.creds = b
	}
	if s.PodLabels != "" {
		b, err := os.ReadFile(s.PodLabels)
		if err != nil {
			return r, fmt.Errorf("--pod-labels: %w", err)
		}
		r.labels, r.hasLabels = b, true
	}
	return r, nil
}

// policyBytes are the policy inputs in order; the hash of a single source is
// exactly policyset.Hash of its bytes.
func (r raw) policyBytes() []byte {
	if r.dir != nil && len(r.files) == 0 {
		return r.dir
	}
	if r.dir == nil && len(r.files) == 1 {
		return r.files[0]
	}
	var b bytes.Buffer
	b.Write(r.dir)
	for _, f := range r.files {
		b.WriteString("\n---\n")
		b.Write(f)
	}
	return b.Bytes()
}

func (r raw) key() string {
	h := sha256.New()
	for _, part := range append([][]byte{[]byte(r.source), r.dir, r.labels, r.creds, r.quotaCreds}, r.files...) {
		fmt.Fprintf(h, "%d:", len(part))
		h.Write(part)
	}
	if r.hasLabels {
		h.Write([]byte{1})
	}
	return hex.EncodeToString(h.Sum(nil))
}

// load reads, parses, validates, selects and compiles the configuration.
func (s Sources) load() (*Config, error) {
	r, err := s.read()
	if err != nil {
		return nil, err
	}
	return r.compile(s, nil)
}

// compile builds the configuration; q holds the clients of the shared quotas
// (nil: none are started, and an upstream with a quotaRef is refused). It
// reads the credentials files the quotas in use name into r (readQuotaCreds)
// before their clients do: a file rewritten in between changes the key the
// next Reload computes, which compiles again.
func (r *raw) compile(s Sources, q *quotaClients) (*Config, error) {
	var doc policyset.Document
	if r.dir != nil {
		d, err := policyset.Unmarshal(r.dir)
		if err != nil {
			if r.source == SourceAPI {
				return nil, fmt.Errorf("ConfigMap %s through the API server: %w", v1alpha1.PoliciesConfigMapName, err)
			}
			return nil, fmt.Errorf("--config-dir %s: %w", s.ConfigDir, err)
		}
		doc.Policies = append(doc.Policies, d.Policies...)
		doc.Quotas = append(doc.Quotas, d.Quotas...)
	}
	if len(r.files) > 0 {
		// One input: a policy may name a CA ConfigMap given in another file.
		ns := cmp.Or(s.Namespace, policyset.DefaultNamespace)
		d, err := policyset.FromPolicyFilesIn(ns, r.files...)
		if err != nil {
			return nil, fmt.Errorf("--policy-file %s: %w", strings.Join(s.PolicyFiles, ","), err)
		}
		doc.Policies = append(doc.Policies, d.Policies...)
		doc.Quotas = append(doc.Quotas, d.Quotas...)
	}
	var labels map[string]string
	if r.hasLabels {
		l, err := parseLabels(r.labels)
		if err != nil {
			return nil, fmt.Errorf("--pod-labels %s: %w", s.PodLabels, err)
		}
		labels = l
	}
	selected, err := policyset.Select(doc, labels)
	if err != nil {
		return nil, err
	}
	var used []policyset.Quota
	for _, name := range policyset.QuotaRefs(selected) {
		pq, ok := doc.Quota(name)
		if !ok {
			return nil, fmt.Errorf("quotaRef %q: no SharedQuota of that name in the configuration", name)
		}
		used = append(used, pq)
	}
	r.readQuotaCreds(credentialsFiles(used))
	quotaOf, err := q.resolve(used, quotaNamespaces(selected), s.QuotaCredentials)
	if err != nil {
		return nil, err
	}
	set, upstreams, err := policyset.CompileWithQuotas(selected, quotaOf)
	if err != nil {
		return nil, err
	}
	routes, err := policyset.CompileRoutes(selected)
	if err != nil {
		return nil, err
	}
	origins, err := tlsUpstreams(upstreams)
	if err != nil {
		return nil, err
	}
	pb := r.policyBytes()
	sum := sha256.Sum256(pb)
	c := &Config{Set: set, Hash: policyset.Hash(pb), SHA256: hex.EncodeToString(sum[:]), key: r.key(), TLS: origins,
		Revision: r.revision, Source: r.source}
	if c.Source == "" {
		c.Source = SourcePolicyFile
	}
	c.Routes = routes
	for _, p := range c.Policies() {
		if !slices.Contains(c.Upstreams, p.Name()) {
			c.Upstreams = append(c.Upstreams, p.Name())
		}
	}
	for _, pq := range used {
		c.Quotas = append(c.Quotas, pq.Name)
	}
	c.policies = policyNames(selected)
	return c, nil
}

// Policies are every compiled policy of c: the Set's and the route rules'.
func (c *Config) Policies() []*retrypolicy.Policy {
	ps := c.Set.Policies()
	if c.Routes != nil {
		ps = append(ps, c.Routes.Policies...)
	}
	return ps
}

// policyNames maps each upstream's name (policyset.Names) to its
// RetryPolicy's namespace/name.
func policyNames(selected []policyset.Policy) map[string]string {
	qualified := policyset.NamesOf(selected)
	names := map[string]string{}
	for _, p := range selected {
		for _, u := range p.Upstreams {
			if r := u.Route; r != nil {
				if _, ok := names[u.Name]; !ok { // the Service's rules: named after its first route
					names[u.Name] = r.Namespace + "/" + r.Name
				}
				continue
			}
			names[qualified.Of(p.Name, u.Name)] = p.Namespace + "/" + p.Name
		}
	}
	return names
}

// parseLabels reads a downward API labels file: one key="value" line per label,
// the value a Go-quoted string (what the kubelet writes). Blank lines are skipped.
//
//	app="checkout"
//	retry.dev/inject="true"     → {"app": "checkout", "retry.dev/inject": "true"}
//
// An empty file is a pod without labels (a non-nil empty map), which is not the
// same as no labels file at all (nil: every policy applies).
func parseLabels(data []byte) (map[string]string, error) {
	out := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("line %d: want key=\"value\"", n)
		}
		val, err := strconv.Unquote(v)
		if err != nil {
			return nil, fmt.Errorf("line %d: value of %s must be a quoted string", n, k)
		}
		out[k] = val
	}
	return out, sc.Err()
}
