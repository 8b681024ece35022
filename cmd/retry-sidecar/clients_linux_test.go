//go:build linux

package main_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/nftables"
	corev1 "k8s.io/api/core/v1"

	"github.com/retrydev/retry-operator/api/v1alpha1"
	"github.com/retrydev/retry-operator/internal/interception"
	"github.com/retrydev/retry-operator/internal/webhook/podinject"
)

// The tests in this file run real HTTP clients (curl, Python, Node, Java)
// that know nothing of the sidecar, inside a network namespace of their own
// (loopback only), against a flaky upstream (503, then 200), with the sidecar
// running as its injected UID. They need root (ip netns, setpriv) and skip
// with the reason otherwise; a client that is not installed skips its row
// (.ci/run installs them). docs/clients.md is the matrix they prove.

const (
	sidecarUID  = 65532
	apiHost     = "api.retry.test"   // has a policy; resolves to 127.0.0.10
	apiAddr     = "127.0.0.10"       //
	otherHost   = "other.retry.test" // no policy; resolves to 127.0.0.11
	otherAddr   = "127.0.0.11"       //
	transparent = "127.0.0.1:15006"
)

// netns is a network namespace made for one test, with the sidecar binary, the
// upstream and the clients' files in a directory every UID can read.
type netns struct {
	t    *testing.T
	name string
	dir  string // world-readable; dir/run is world-writable
	bin  string // the sidecar binary, copied into dir
}

func newNetns(t *testing.T) *netns {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates a network namespace (ip netns add) and runs the sidecar as uid 65532")
	}
	for _, tool := range []string{"ip", "setpriv"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s (iproute2, util-linux): %v", tool, err)
		}
	}
	var rnd [4]byte
	rand.Read(rnd[:])
	n := &netns{t: t, name: "retry-test-" + hex.EncodeToString(rnd[:])}
	if out, err := exec.Command("ip", "netns", "add", n.name).CombinedOutput(); err != nil {
		t.Skipf("no network namespaces here (ip netns add: %v: %s)", err, bytes.TrimSpace(out))
	}
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "del", n.name).CombinedOutput(); err != nil {
			t.Errorf("ip netns del %s: %v: %s", n.name, err, out)
		}
	})
	n.must("ip", "link", "set", "lo", "up")

	// `ip netns exec` bind-mounts /etc/netns/<name>/hosts over /etc/hosts.
	etc := filepath.Join("/etc/netns", n.name)
	if err := os.MkdirAll(etc, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(etc) })
	hosts := fmt.Sprintf("127.0.0.1 localhost\n::1 localhost\n%s %s\n%s %s\n", apiAddr, apiHost, otherAddr, otherHost)
	must(t, os.WriteFile(filepath.Join(etc, "hosts"), []byte(hosts), 0o644))

	dir, err := os.MkdirTemp("", "retry-netns-")
	must(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	must(t, os.Chmod(dir, 0o755))
	must(t, os.Mkdir(filepath.Join(dir, "run"), 0o777))
	must(t, os.Chmod(filepath.Join(dir, "run"), 0o777))
	n.dir = dir
	n.bin = filepath.Join(dir, "retry-sidecar")
	b, err := os.ReadFile(sidecarBin)
	must(t, err)
	must(t, os.WriteFile(n.bin, b, 0o755))
	return n
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// command runs name inside the namespace, as root, with exactly env.
func (n *netns) command(ctx context.Context, env []string, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", n.name, name}, args...)...)
	cmd.Env = env
	cmd.WaitDelay = time.Second
	return cmd
}

// commandAs runs name inside the namespace as uid:gid, no supplementary
// groups, no capabilities.
func (n *netns) commandAs(ctx context.Context, uid int, name string, args ...string) *exec.Cmd {
	id := strconv.Itoa(uid)
	return n.command(ctx, baseEnv(), "setpriv", append([]string{"--reuid=" + id, "--regid=" + id, "--clear-groups",
		"--inh-caps=-all", "--bounding-set=-all", "--", name}, args...)...)
}

func (n *netns) must(name string, args ...string) {
	n.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if out, err := n.command(ctx, baseEnv(), name, args...).CombinedOutput(); err != nil {
		n.t.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
}

// background starts cmd and waits until file exists; the process is killed
// when the test ends.
func (n *netns) background(cmd *exec.Cmd, file string) {
	n.t.Helper()
	var logs syncBuffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	must(n.t, cmd.Start())
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	n.t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
		if n.t.Failed() {
			n.t.Logf("%s:\n%s", cmd.Args, logs.String())
		}
	})
	deadline := time.Now().Add(15 * time.Second)
	for {
		if _, err := os.Stat(file); err == nil {
			return
		}
		select {
		case <-exited:
			n.t.Fatalf("%s exited before it was ready:\n%s", cmd.Args, logs.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			n.t.Fatalf("%s not ready after 15s:\n%s", cmd.Args, logs.String())
		}
	}
}

// arrivals counts the upstream arrivals for path, by the upstream address
// they reached.
func (n *netns) arrivals(path string) map[string]int {
	b, err := os.ReadFile(filepath.Join(n.dir, "run", "arrivals"))
	must(n.t, err)
	got := map[string]int{}
	for _, line := range strings.Split(string(b), "\n") {
		if addr, p, ok := strings.Cut(line, " "); ok && p == path {
			got[addr]++
		}
	}
	return got
}

func baseEnv() []string {
	return []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root", "LANG=C.UTF-8"}
}

// client is one real HTTP client: argv for a URL, printing "STATUS OUTCOME"
// (OUTCOME is the X-Retry-Outcome header, "-" when absent) as its last line.
type client struct {
	name string
	argv func(url string) []string
	// missing says why the client cannot run here, "" when it can.
	missing func() string
	// envReaches: whether the proxy environment reaches this client.
	envReaches func() bool
}

func always() bool { return true }

func lookPath(names ...string) func() string {
	return func() string {
		for _, n := range names {
			if _, err := exec.LookPath(n); err != nil {
				return n + " is not installed"
			}
		}
		return ""
	}
}

// nodeHasEnvProxy: NODE_USE_ENV_PROXY exists from Node 22.21 (and 24.0) on.
func nodeHasEnvProxy() bool {
	major, minor := nodeVersion()
	return major >= 24 || (major == 22 && minor >= 21)
}

func nodeVersion() (major, minor int) {
	out, err := exec.Command("node", "-p", "process.versions.node").Output()
	if err != nil {
		return 0, 0
	}
	f := strings.SplitN(strings.TrimSpace(string(out)), ".", 3)
	if len(f) < 2 {
		return 0, 0
	}
	major, _ = strconv.Atoi(f[0])
	minor, _ = strconv.Atoi(f[1])
	return major, minor
}

const pyPrint = `print(r.status, r.headers.get("X-Retry-Outcome") or "-")`

// javaClient is compiled once per test run into dir/java.
const javaClient = `import java.net.*;
import java.net.http.*;

public class Client {
    public static void main(String[] a) throws Exception {
        if (a[0].equals("httpclient")) {
            HttpClient c = HttpClient.newHttpClient();
            HttpResponse<String> r = c.send(HttpRequest.newBuilder(URI.create(a[1])).build(), HttpResponse.BodyHandlers.ofString());
            System.out.println(r.statusCode() + " " + r.headers().firstValue("X-Retry-Outcome").orElse("-"));
            return;
        }
        HttpURLConnection c = (HttpURLConnection) new URL(a[1]).openConnection();
        int s = c.getResponseCode();
        String o = c.getHeaderField("X-Retry-Outcome");
        System.out.println(s + " " + (o == null ? "-" : o));
    }
}
`

func clients(n *netns) []client {
	javaDir := filepath.Join(n.dir, "java")
	javaMissing := func() string {
		if m := lookPath("java", "javac")(); m != "" {
			return m + " (Debian: openjdk-17-jdk-headless)"
		}
		if _, err := os.Stat(filepath.Join(javaDir, "Client.class")); err == nil {
			return ""
		}
		must(n.t, os.MkdirAll(javaDir, 0o755))
		must(n.t, os.WriteFile(filepath.Join(javaDir, "Client.java"), []byte(javaClient), 0o644))
		if out, err := exec.Command("javac", "-d", javaDir, filepath.Join(javaDir, "Client.java")).CombinedOutput(); err != nil {
			n.t.Fatalf("javac: %v\n%s", err, out)
		}
		return ""
	}
	python := func() string {
		if m := lookPath("/usr/bin/python3")(); m != "" {
			return m + " (Debian: python3)"
		}
		return ""
	}
	return []client{
		{name: "curl", missing: lookPath("curl"), envReaches: always, argv: func(u string) []string {
			return []string{"curl", "-sS", "-o", "/dev/null", "-w", "%{http_code} %header{x-retry-outcome}\n", u}
		}},
		{name: "python-urllib", missing: python, envReaches: always, argv: func(u string) []string {
			return []string{"/usr/bin/python3", "-c", `import sys, urllib.request, urllib.error
try:
    r = urllib.request.urlopen(sys.argv[1], timeout=30)
except urllib.error.HTTPError as e:
    r = e
` + pyPrint, u}
		}},
		{name: "python-requests", envReaches: always, missing: func() string {
			if m := python(); m != "" {
				return m
			}
			if exec.Command("/usr/bin/python3", "-c", "import requests").Run() != nil {
				return "python3 requests is not installed (Debian: python3-requests)"
			}
			return ""
		}, argv: func(u string) []string {
			return []string{"/usr/bin/python3", "-c", `import sys, requests
r = requests.get(sys.argv[1], timeout=30)
print(r.status_code, r.headers.get("X-Retry-Outcome") or "-")`, u}
		}},
		{name: "node-fetch", missing: lookPath("node"), envReaches: nodeHasEnvProxy, argv: func(u string) []string {
			return []string{"node", "-e", `fetch(process.argv[1]).then(r => console.log(r.status + " " + (r.headers.get("x-retry-outcome") || "-")))`, u}
		}},
		{name: "node-http.get", missing: lookPath("node"), envReaches: nodeHasEnvProxy, argv: func(u string) []string {
			return []string{"node", "-e", `require("http").get(process.argv[1], r => { r.resume(); console.log(r.statusCode + " " + (r.headers["x-retry-outcome"] || "-")) })`, u}
		}},
		{name: "java-HttpClient", missing: javaMissing, envReaches: always, argv: func(u string) []string {
			return []string{"java", "-cp", javaDir, "Client", "httpclient", u}
		}},
		{name: "java-HttpURLConnection", missing: javaMissing, envReaches: always, argv: func(u string) []string {
			return []string{"java", "-cp", javaDir, "Client", "urlconnection", u}
		}},
	}
}

// run runs a client and returns its last output line.
func (n *netns) run(c client, env []string, url string) string {
	n.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	argv := c.argv(url)
	var stdout, stderr bytes.Buffer
	cmd := n.command(ctx, env, argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		n.t.Fatalf("%s: %v\nstdout: %s\nstderr: %s", c.name, err, stdout.String(), stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	f := strings.Fields(lines[len(lines)-1])
	if len(f) == 1 { // curl prints nothing for a header that is absent
		f = append(f, "-")
	}
	return strings.Join(f, " ")
}

// startStack starts the flaky upstream (127.0.0.10:80, :8080, 127.0.0.11:80)
// and the sidecar as uid 65532 with the forward and the transparent listener,
// both with the injector's ports.
func (n *netns) startStack() {
	n.t.Helper()
	run := filepath.Join(n.dir, "run")
	upReady := filepath.Join(run, "upstream.ready")
	spec := fmt.Sprintf("%s:80,%s:8080,%s:80|%s|%s", apiAddr, apiAddr, otherAddr, filepath.Join(run, "arrivals"), upReady)
	self, err := os.Executable()
	must(n.t, err)
	up := n.command(context.Background(), append(baseEnv(), flakyUpstreamEnv+"="+spec), self)
	n.background(up, upReady)

	policy := filepath.Join(n.dir, "policy.yaml")
	must(n.t, os.WriteFile(policy, []byte(fmt.Sprintf(`apiVersion: policy.retry.dev/v1alpha1
kind: RetryPolicy
metadata: {name: api}
spec:
  upstreams:
  - name: api
    hosts: [%q, "%s:8080"]
    maxAttempts: 3
    backoff: {base: 10ms, max: 50ms, jitter: None}
`, apiHost, apiHost)), 0o644))
	n.startSidecar(policy, filepath.Join(run, "sidecar.ready"))
}

// startSidecar runs the sidecar in the namespace as the injector does (its own
// UID, the injected ports, transparent listener included) on a policy file,
// and waits for its ready file.
func (n *netns) startSidecar(policy, ready string) {
	sc := n.commandAs(context.Background(), sidecarUID, n.bin,
		fmt.Sprintf("--listen=127.0.0.1:%d", v1alpha1.ProxyPort),
		fmt.Sprintf("--admin-listen=127.0.0.1:%d", v1alpha1.AdminPort),
		fmt.Sprintf("--transparent-listen=127.0.0.1:%d", v1alpha1.TransparentPort),
		"--policy-file="+policy, "--ready-file="+ready, "--drain-timeout=1s")
	n.background(sc, ready)
}

// injectedEnv is the environment the injector gives an app container.
func injectedEnv(t *testing.T) []string {
	cfg := podinject.Config{Image: podinject.DefaultImage, NoProxy: podinject.DefaultNoProxy, Resources: podinject.DefaultResources()}
	pod := cfg.Inject(&corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app"}}}})
	env := baseEnv()
	for _, e := range pod.Spec.Containers[0].Env {
		env = append(env, e.Name+"="+e.Value)
	}
	if len(env) == len(baseEnv()) {
		t.Fatal("the injector set no environment")
	}
	return env
}

// injectedRedirectArgs are the redirect init container's arguments that the
// injector writes for a pod asking for transparent interception of 80 and 8080.
func injectedRedirectArgs(t *testing.T) []string {
	cfg := podinject.Config{Image: podinject.DefaultImage, NoProxy: podinject.DefaultNoProxy, Resources: podinject.DefaultResources()}
	pod := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app"}}}}
	pod.Annotations = map[string]string{v1alpha1.LabelInterception: v1alpha1.InterceptionTransparent, v1alpha1.AnnotationInterceptPorts: "80,8080"}
	ic := podinject.DecideInterception(&corev1.Namespace{}, pod)
	out := cfg.InjectMode(pod, ic)
	if ic.Mode != podinject.ModeTransparent || out.Spec.InitContainers[0].Name != podinject.RedirectContainerName {
		t.Fatalf("the injector did not choose transparent interception: %+v", ic)
	}
	if env := out.Spec.Containers[0].Env; len(env) != 0 {
		t.Fatalf("transparent interception sets the app's environment: %v", env)
	}
	want := fmt.Sprintf("--transparent-listen=%s", transparent)
	if !slices.Contains(out.Spec.InitContainers[1].Args, want) {
		t.Fatalf("sidecar args %q lack %s", out.Spec.InitContainers[1].Args, want)
	}
	return out.Spec.InitContainers[0].Args
}

// TestRealClientsThroughTheProxyEnvironment: each client, with the
// environment the injector sets (HTTP_PROXY, NODE_USE_ENV_PROXY,
// JAVA_TOOL_OPTIONS…) and no interception, calls the flaky upstream. A client
// the environment reaches sees "200 success" after exactly 2 arrivals; one it
// does not reach sees the upstream's own "503 -" after 1 (recorded, not a
// failure: that is the matrix's "no").
func TestRealClientsThroughTheProxyEnvironment(t *testing.T) {
	n := newNetns(t)
	n.startStack()
	env := injectedEnv(t)
	for _, c := range clients(n) {
		t.Run(c.name, func(t *testing.T) {
			if why := c.missing(); why != "" {
				t.Skip(why)
			}
			path := "/env/" + c.name
			got := n.run(c, env, "http://"+apiHost+path)
			want, wantArrivals := "200 success", 2
			if !c.envReaches() {
				want, wantArrivals = "503 -", 1
			}
			if got != want {
				t.Errorf("%s through the proxy environment: got %q, want %q", c.name, got, want)
			}
			if a := n.arrivals(path); a[apiAddr+":80"] != wantArrivals || len(a) != 1 {
				t.Errorf("arrivals = %v, want %d at %s:80", a, wantArrivals, apiAddr)
			}
			t.Logf("%s, proxy environment: %s (reached by the environment: %v)", c.name, got, c.envReaches())
		})
	}
}

// TestRealClientsTransparentInterception: the same clients with no proxy
// settings at all, after `retry-sidecar redirect` (as the injected init
// container runs it): every one sees "200 success" after exactly 2 arrivals.
func TestRealClientsTransparentInterception(t *testing.T) {
	n := newNetns(t)
	n.startStack()
	n.must(n.bin, injectedRedirectArgs(t)...)
	env := baseEnv()
	for _, c := range clients(n) {
		t.Run(c.name, func(t *testing.T) {
			if why := c.missing(); why != "" {
				t.Skip(why)
			}
			path := "/transparent/" + c.name
			if got := n.run(c, env, "http://"+apiHost+path); got != "200 success" {
				t.Errorf("%s intercepted: got %q, want \"200 success\"", c.name, got)
			}
			if a := n.arrivals(path); a[apiAddr+":80"] != 2 || len(a) != 1 {
				t.Errorf("arrivals = %v, want 2 at %s:80", a, apiAddr)
			}
		})
	}

	curl := clients(n)[0]
	if why := curl.missing(); why != "" {
		t.Skip(why)
	}
	cases := map[string]struct {
		url, path string
		extra     []string // curl arguments
		want      string
		arrivals  map[string]int
	}{
		"a second intercepted port gets the policy of host:8080": {
			url: "http://" + apiHost + ":8080/p8080", path: "/p8080",
			want: "200 success", arrivals: map[string]int{apiAddr + ":8080": 2}},
		"a host without a policy passes through to its original destination": {
			url: "http://" + otherHost + "/nopolicy", path: "/nopolicy",
			want: "503 -", arrivals: map[string]int{otherAddr + ":80": 1}},
		"the upstream is the original destination, not a DNS lookup of Host": {
			url: "http://" + otherAddr + "/byaddr", extra: []string{"-H", "Host: " + apiHost}, path: "/byaddr",
			want: "200 success", arrivals: map[string]int{otherAddr + ":80": 2}},
		"a Host that resolves nowhere still reaches the original destination": {
			url: "http://" + apiAddr + "/noname", extra: []string{"-H", "Host: nowhere.retry.test"}, path: "/noname",
			want: "503 -", arrivals: map[string]int{apiAddr + ":80": 1}},
		"an absolute-form request (an app's own proxy on an intercepted port) is refused": {
			url: "http://" + otherHost + "/absolute", extra: []string{"--proxy", "http://" + apiAddr + ":80"}, path: "/absolute",
			want: "400 -", arrivals: map[string]int{}},
		"a connection straight to the transparent listener is a loop": {
			url: "http://" + transparent + "/loop", path: "/loop", want: "508 -", arrivals: map[string]int{}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			c := curl
			c.argv = func(u string) []string {
				argv := curl.argv(u)
				return append(append(argv[:len(argv)-1:len(argv)-1], tc.extra...), u)
			}
			if got := n.run(c, env, tc.url); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
			if a := n.arrivals(tc.path); fmt.Sprint(a) != fmt.Sprint(tc.arrivals) {
				t.Errorf("arrivals = %v, want %v", a, tc.arrivals)
			}
		})
	}
}

// TestRedirectSubcommand: the rules are installed once however often the init
// container runs, and a missing capability is a clear error.
func TestRedirectSubcommand(t *testing.T) {
	n := newNetns(t)
	args := injectedRedirectArgs(t)
	n.must(n.bin, args...)
	n.must(n.bin, args...)

	f, err := os.Open(filepath.Join("/run/netns", n.name))
	must(t, err)
	defer f.Close()
	conn, err := nftables.New(nftables.WithNetNSFd(int(f.Fd())))
	must(t, err)
	table := &nftables.Table{Family: nftables.TableFamilyIPv4, Name: interception.TableName}
	rules, err := conn.GetRules(table, &nftables.Chain{Name: interception.ChainName, Table: table})
	must(t, err)
	if len(rules) != 3 {
		t.Errorf("after two runs: %d rules, want 3 (uid exclusion, port 80, port 8080)", len(rules))
	}
	tables, err := conn.ListTables()
	must(t, err)
	if len(tables) != 1 {
		t.Errorf("%d tables, want 1", len(tables))
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := n.commandAs(ctx, 65534, n.bin, args...).CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 || !strings.Contains(string(out), "needs the NET_ADMIN capability") {
		t.Errorf("without the capability: %v\n%s\nwant exit 1 naming NET_ADMIN", err, out)
	}
}
