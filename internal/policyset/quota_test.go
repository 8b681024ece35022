package policyset

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/retrydev/retry-operator/api/v1alpha1"
)

const quotaYAML = `
apiVersion: policy.retry.dev/v1alpha1
kind: SharedQuota
metadata: {name: partner-payments}
spec:
  requestsPerMinute: 90
  burst: 5
  concurrency: 3
  consumers: {namespaceSelector: {}}
  store: {redis: {address: "127.0.0.1:6379", credentialsSecretRef: {name: quota-redis}}}
---
apiVersion: policy.retry.dev/v1alpha1
kind: SharedQuota
metadata: {name: unused}
spec:
  requestsPerSecond: 1000
  consumers: {namespaceSelector: {}}
  store: {redis: {address: "127.0.0.1:6379"}}
`

const quotaPolicyYAML = `
apiVersion: policy.retry.dev/v1alpha1
kind: RetryPolicy
metadata: {name: partner, namespace: shop}
spec:
  upstreams:
  - name: partner
    hosts: ["api.partner.example"]
    quotaRef: {name: partner-payments}
  - name: partner-2
    hosts: ["api2.partner.example"]
    quotaRef: {name: partner-payments}
`

func TestPolicyFilesRenderTheReferencedQuotas(t *testing.T) {
	doc, err := FromPolicyFiles([]byte(quotaPolicyYAML), []byte(quotaYAML))
	if err != nil {
		t.Fatal(err)
	}
	want := []Quota{{
		Name: "partner-payments", RequestsPerSecond: 1.5, Burst: 5, Concurrency: 3, OnStoreLoss: v1alpha1.StoreLossLastShare,
		Store: &QuotaStore{Redis: RedisStore{Address: "127.0.0.1:6379"}},
	}}
	if diff := cmp.Diff(want, doc.Quotas); diff != "" {
		t.Errorf("quotas (-want +got):\n%s", diff)
	}
	if got := doc.Policies[0].Upstreams[1].QuotaRef; got == nil || got.Name != "partner-payments" {
		t.Errorf("upstreams[1].quotaRef = %+v, want partner-payments", got)
	}
	data, err := Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	back, err := Unmarshal(data)
	if err != nil {
		t.Fatal(err)
	}
	if back.Version != QuotaWrittenVersion {
		t.Errorf("a document with quotas has version %d, want %d", back.Version, QuotaWrittenVersion)
	}
	if diff := cmp.Diff(want, back.Quotas); diff != "" {
		t.Errorf("quotas read back (-want +got):\n%s", diff)
	}
	if strings.Contains(string(data), "quota-redis") {
		t.Errorf("the rendering names the admin Secret:\n%s", data)
	}
}

func TestPolicyFilesRefuseQuotaRefsTheyCannotHonour(t *testing.T) {
	policy := func(ns string) string {
		return strings.Replace(quotaPolicyYAML, "namespace: shop", "namespace: "+ns, 1)
	}
	quota := func(consumers string) string {
		return `
apiVersion: policy.retry.dev/v1alpha1
kind: SharedQuota
metadata: {name: partner-payments}
spec:
  requestsPerSecond: 10
  ` + consumers + `
  store: {redis: {address: "127.0.0.1:6379"}}
`
	}
	for name, tc := range map[string]struct {
		files   []string
		wantErr string
	}{
		"a quotaRef to a quota not in the files names it": {
			files:   []string{policy("shop")},
			wantErr: `RetryPolicy shop/partner: spec.upstreams[0].quotaRef.name: Not found: "partner-payments": no SharedQuota partner-payments in the policy files`,
		},
		"a quota without consumers admits no policy": {
			files:   []string{policy("shop"), quota("")},
			wantErr: "RetryPolicy shop/partner: spec.upstreams[0].quotaRef.name: Forbidden: SharedQuota partner-payments does not admit namespace shop (QuotaNotAllowed;",
		},
		"a selector that does not match the namespace name admits no policy": {
			files:   []string{policy("shop"), quota("consumers: {namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: payments}}}")},
			wantErr: "does not admit namespace shop",
		},
		"a quota given twice is refused": {
			files:   []string{policy("shop"), quota("consumers: {namespaceSelector: {}}"), quota("consumers: {namespaceSelector: {}}")},
			wantErr: "file 2, document 0: SharedQuota partner-payments is given twice",
		},
		"an invalid quota is refused with its field path": {
			files:   []string{policy("shop"), strings.Replace(quota(""), "requestsPerSecond: 10", "requestsPerSecond: 10\n  requestsPerMinute: 60", 1)},
			wantErr: "SharedQuota partner-payments: spec.requestsPerSecond: Forbidden: exactly one of requestsPerMinute or requestsPerSecond is required",
		},
		"an unknown field of a quota is refused": {
			files:   []string{policy("shop"), strings.Replace(quota(""), "requestsPerSecond: 10", "requestsPerSecond: 10\n  password: hunter2", 1)},
			wantErr: "document 0: spec.password: unknown field; the fields here are",
		},
	} {
		t.Run(name, func(t *testing.T) {
			var files [][]byte
			for _, f := range tc.files {
				files = append(files, []byte(f))
			}
			_, err := FromPolicyFiles(files...)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestPolicyFilesAdmitByNamespaceName(t *testing.T) {
	q := strings.Replace(quotaYAML, "consumers: {namespaceSelector: {}}", "consumers: {namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: shop}}}", 1)
	if _, err := FromPolicyFiles([]byte(quotaPolicyYAML), []byte(q)); err != nil {
		t.Fatalf("a selector naming the policy's namespace: %v", err)
	}
}

func TestRenderQuota(t *testing.T) {
	i32 := func(v int32) *int32 { return &v }
	deny := v1alpha1.StoreLossDeny
	lease := &QuotaLease{URL: "https://retry-operator-webhook-service.retry-operator-system.svc:9445", Address: "10.96.0.12:9445",
		CABundle: "-----BEGIN CERTIFICATE-----\n", TokenFile: v1alpha1.QuotaTokenPath}
	for name, tc := range map[string]struct {
		spec  v1alpha1.SharedQuotaSpec
		lease *QuotaLease
		want  Quota
	}{
		"requestsPerMinute is divided by 60 and the defaults apply": {
			spec: v1alpha1.SharedQuotaSpec{RequestsPerMinute: i32(90)}, lease: lease,
			want: Quota{Name: "q", RequestsPerSecond: 1.5, Burst: 1, OnStoreLoss: v1alpha1.StoreLossLastShare, Lease: lease},
		},
		"requestsPerSecond, concurrency and onStoreLoss are carried as given": {
			spec: v1alpha1.SharedQuotaSpec{RequestsPerSecond: i32(1000), Burst: i32(20), Concurrency: i32(7), OnStoreLoss: &deny}, lease: lease,
			want: Quota{Name: "q", RequestsPerSecond: 1000, Burst: 20, Concurrency: 7, OnStoreLoss: v1alpha1.StoreLossDeny, Lease: lease},
		},
		"without a lease endpoint (policy files) the store's address, never its Secret": {
			spec: v1alpha1.SharedQuotaSpec{RequestsPerSecond: i32(10)},
			want: Quota{Name: "q", RequestsPerSecond: 10, Burst: 1, OnStoreLoss: v1alpha1.StoreLossLastShare,
				Store: &QuotaStore{Redis: RedisStore{Address: "redis:6379"}}},
		},
	} {
		t.Run(name, func(t *testing.T) {
			tc.spec.Store.Redis = v1alpha1.RedisStore{Address: "redis:6379", CredentialsSecretRef: &v1alpha1.SecretRef{Name: "admin"}}
			q := &v1alpha1.SharedQuota{Spec: tc.spec}
			q.Name = "q"
			before := q.DeepCopy()
			if diff := cmp.Diff(tc.want, RenderQuota(q, tc.lease)); diff != "" {
				t.Errorf("RenderQuota (-want +got):\n%s", diff)
			}
			if !cmp.Equal(before, q) {
				t.Errorf("RenderQuota modified its input")
			}
		})
	}
}

func TestUnmarshalRefusesAQuotaRefWithoutItsQuota(t *testing.T) {
	data := `{"version":2,"policies":[{"namespace":"shop","name":"p","generation":1,
	  "upstreams":[{"name":"u","hosts":["a.svc"],"quotaRef":{"name":"gone"}}]}]}`
	_, err := Unmarshal([]byte(data))
	want := `decoding policies.json: RetryPolicy shop/p: spec.upstreams[0].quotaRef.name: Not found: "gone": the document has no quota of that name`
	if err == nil || err.Error() != want {
		t.Fatalf("err = %v, want %s", err, want)
	}
}

func TestCredentials(t *testing.T) {
	for name, tc := range map[string]struct {
		in      string
		want    Credentials
		wantErr string
	}{
		"the formatted text reads back": {
			in:   string(Credentials{Username: "retry-operator:ns:shop", Password: "s3cr:et"}.Format()),
			want: Credentials{Username: "retry-operator:ns:shop", Password: "s3cr:et"},
		},
		"comments, blank lines and spaces are ignored": {
			in:   "# from the Secret\n\n  password:   pw  \n",
			want: Credentials{Username: DefaultRedisUser, Password: "pw"},
		},
		"a file without a password is refused":        {in: "username: u\n", wantErr: `no "password: <secret>" line`},
		"an unknown key is refused without its value": {in: "pass: hunter2\n", wantErr: `line 1: must be "username: <name>" or "password: <secret>"`},
		"a key given twice is refused":                {in: "password: a\npassword: b\n", wantErr: "line 2: password given twice"},
		"an empty password is refused":                {in: "password:\n", wantErr: "line 1: password is empty"},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := ParseCredentials([]byte(tc.in))
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("err = %v, want %s", err, tc.wantErr)
				}
				if strings.Contains(err.Error(), "hunter2") {
					t.Errorf("the error shows the value: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
			if s := got.String(); strings.Contains(s, got.Password) {
				t.Errorf("String() = %q shows the password", s)
			}
		})
	}
}
