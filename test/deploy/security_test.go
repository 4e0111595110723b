package deploy

import (
	"bufio"
	"context"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/sidelock/sidelock/internal/injector"
	"github.com/sidelock/sidelock/internal/redistest"
)

// The masters' defaults (issue 16, finding 5): a password nobody has to
// choose, kept across upgrades; a NetworkPolicy that lets only pods with
// the sidecar in; probes that tell a live master from a serving one.

// generatedSecret returns the chart's Secret of the masters' password and
// the password.
func generatedSecret(t *testing.T, objs []object) (*corev1.Secret, string) {
	t.Helper()
	var found []*corev1.Secret
	for _, s := range ofType[*corev1.Secret](objs) {
		if s.Labels["app.kubernetes.io/component"] == "redis" {
			found = append(found, s)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d Secrets of the masters, want 1", len(found))
	}
	s := found[0]
	pw := string(s.Data["password"])
	if pw == "" {
		pw = s.StringData["password"]
	}
	return s, pw
}

// By default the masters require a password, which the chart generates
// (long and random), and which upgrades keep: Helm's lookup reads the
// installed Secret back. A reinstall finds it too (resource-policy keep).
func TestChartGeneratesAndKeepsThePassword(t *testing.T) {
	first, err := render(loadChart(t), nil, releaseName)
	if err != nil {
		t.Fatal(err)
	}
	secret, pw := generatedSecret(t, first.objs)
	if len(pw) < 32 {
		t.Errorf("generated password of %d characters, want at least 32", len(pw))
	}
	if secret.Annotations["helm.sh/resource-policy"] != "keep" {
		t.Errorf("generated Secret annotations %v: want helm.sh/resource-policy: keep", secret.Annotations)
	}
	again, err := render(loadChart(t), nil, releaseName)
	if err != nil {
		t.Fatal(err)
	}
	if _, other := generatedSecret(t, again.objs); other == pw {
		t.Error("two installs generate the same password")
	}

	stored := secret.DeepCopy()
	stored.Namespace = releaseNS
	up := renderUpgrade(t, nil, stored)
	if _, kept := generatedSecret(t, up); kept != pw {
		t.Error("upgrade generated a new password instead of keeping the installed one")
	}
	// The upgrade's masters' pod template is the install's (no restart).
	if a, b := redisPodAnnotations(t, first.objs), redisPodAnnotations(t, up); a != b {
		t.Errorf("upgrade changes the masters' pod annotations (restarts them): %s, then %s", a, b)
	}

	// A password in the values is used as it is, and not kept on uninstall.
	given, err := render(loadChart(t), parseValues(t, "redis: {auth: {password: s3cret}}"), releaseName)
	if err != nil {
		t.Fatal(err)
	}
	if s, p := generatedSecret(t, given.objs); p != "s3cret" || s.Annotations["helm.sh/resource-policy"] != "" {
		t.Errorf("given password: %q, annotations %v", p, s.Annotations)
	}
}

func redisPodAnnotations(t *testing.T, objs []object) string {
	t.Helper()
	m, ok := checkMasters(t, objs, releaseNS)
	if !ok {
		t.Fatal("no masters")
	}
	var b strings.Builder
	for k, v := range m.sts.Spec.Template.Annotations {
		b.WriteString(k + "=" + v + ";")
	}
	return b.String()
}

// networkPolicyOf returns the NetworkPolicy that selects the masters'
// pods, nil if none.
func networkPolicyOf(t *testing.T, objs []object) *networkingv1.NetworkPolicy {
	t.Helper()
	m, ok := checkMasters(t, objs, releaseNS)
	if !ok {
		t.Fatal("no masters")
	}
	var found *networkingv1.NetworkPolicy
	for _, np := range ofType[*networkingv1.NetworkPolicy](objs) {
		if selects(t, "NetworkPolicy "+np.Name, &np.Spec.PodSelector, m.sts.Spec.Template.Labels) {
			if found != nil {
				t.Fatalf("NetworkPolicies %s and %s both select the masters", found.Name, np.Name)
			}
			found = np
		}
	}
	return found
}

// checkMastersPolicyTypes: the policy rules the masters' ingress, and
// denies them all egress (no rules): they never open a connection.
func checkMastersPolicyTypes(t *testing.T, np *networkingv1.NetworkPolicy) {
	t.Helper()
	if !slices.Equal(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}) || len(np.Spec.Egress) != 0 {
		t.Errorf("policyTypes %v, egress %v: want [Ingress Egress] and no egress rule", np.Spec.PolicyTypes, np.Spec.Egress)
	}
}

// peer is a pod that may try to connect to the masters.
type peer struct {
	name     string
	labels   labels.Set
	ns       string
	nsLabels labels.Set
	want     bool
}

// admits evaluates a NetworkPolicy's ingress rules as the network plugin
// does, for a TCP connection to the masters' redis port.
func admits(t *testing.T, np *networkingv1.NetworkPolicy, p peer, redisPort corev1.ContainerPort) bool {
	t.Helper()
	for _, rule := range np.Spec.Ingress {
		portOK := len(rule.Ports) == 0
		for _, port := range rule.Ports {
			proto := corev1.ProtocolTCP
			if port.Protocol != nil {
				proto = *port.Protocol
			}
			if proto == corev1.ProtocolTCP && port.Port != nil && (port.Port.String() == redisPort.Name || port.Port.IntValue() == int(redisPort.ContainerPort)) {
				portOK = true
			}
		}
		if !portOK {
			continue
		}
		for _, from := range rule.From {
			if from.IPBlock != nil {
				continue
			}
			nsOK := from.NamespaceSelector == nil && p.ns == releaseNS ||
				from.NamespaceSelector != nil && matchesSelector(t, from.NamespaceSelector, p.nsLabels)
			podOK := from.PodSelector == nil || matchesSelector(t, from.PodSelector, p.labels)
			if nsOK && podOK {
				return true
			}
		}
	}
	return false
}

// The NetworkPolicy admits, from any namespace, the pods that carry the
// sidecar, whichever way they got it: injected for the pod label, injected
// for the namespace label (the injector labels them), or the helm test pod
// of this release; and nobody else.
func TestChartNetworkPolicyAdmitsOnlyPodsWithTheSidecar(t *testing.T) {
	r, err := render(loadChart(t), nil, releaseName)
	if err != nil {
		t.Fatal(err)
	}
	np := networkPolicyOf(t, r.objs)
	if np == nil {
		t.Fatal("no NetworkPolicy selects the masters by default")
	}
	checkMastersPolicyTypes(t, np)
	m, _ := checkMasters(t, r.objs, releaseNS)
	var redisPort corev1.ContainerPort
	for _, p := range redisContainer(m.sts).Ports {
		if p.Name == "redis" {
			redisPort = p
		}
	}

	// Pods as the API server stores them after the injector (the chart's
	// spec): one opted in by label in another namespace, one of an opted-in
	// namespace without the label.
	spec, _ := injectorSpecOf(t, r.objs)
	byLabel, _ := injectPod(t, spec, podFor(nil), "shop")
	plain := podFor(nil)
	delete(plain.Labels, injector.InjectLabel)
	byNamespace, _ := injectPod(t, spec, plain, "web")
	if len(byNamespace.Spec.InitContainers) != 1 {
		t.Fatal("the injector did not inject a pod without the label (namespace opt-in)")
	}
	test := helmTestPod(t, r.objs)
	nsLabels := func(ns string) labels.Set { return labels.Set{corev1.LabelMetadataName: ns} }
	for _, p := range []peer{
		{"injected for its label, other namespace", byLabel.Labels, "shop", nsLabels("shop"), true},
		{"injected for its namespace's label", byNamespace.Labels, "web", labels.Merge(nsLabels("web"), optedInNamespace), true},
		{"the helm test pod", test.meta().GetLabels(), releaseNS, nsLabels(releaseNS), true},
		{"a pod without the sidecar", labels.Set{"app": "web"}, "shop", nsLabels("shop"), false},
		{"a pod without the sidecar, release namespace", labels.Set{"app": "web"}, releaseNS, nsLabels(releaseNS), false},
		{"a pod opted out", labels.Set{injector.InjectLabel: "false"}, "web", labels.Merge(nsLabels("web"), optedInNamespace), false},
	} {
		if got := admits(t, np, p, redisPort); got != p.want {
			t.Errorf("%s (labels %v, namespace %s): admitted %v, want %v", p.name, p.labels, p.ns, got, p.want)
		}
	}

	// Narrowed to some namespaces, with an extra peer; or off.
	r, err = render(loadChart(t), parseValues(t, `redis:
  networkPolicy:
    clientNamespaceSelector: {matchLabels: {team: payments}}
    extraFrom: [{podSelector: {matchLabels: {app: redis-exporter}}}]`), releaseName)
	if err != nil {
		t.Fatal(err)
	}
	np = networkPolicyOf(t, r.objs)
	for _, p := range []peer{
		{"sidecar in a namespace of the team", byLabel.Labels, "shop", labels.Set{corev1.LabelMetadataName: "shop", "team": "payments"}, true},
		{"sidecar elsewhere", byLabel.Labels, "shop", nsLabels("shop"), false},
		{"the exporter", labels.Set{"app": "redis-exporter"}, releaseNS, nsLabels(releaseNS), true},
	} {
		if got := admits(t, np, p, redisPort); got != p.want {
			t.Errorf("narrowed: %s: admitted %v, want %v", p.name, got, p.want)
		}
	}
	r, err = render(loadChart(t), parseValues(t, "redis: {networkPolicy: {enabled: false}}"), releaseName)
	if err != nil {
		t.Fatal(err)
	}
	if np := networkPolicyOf(t, r.objs); np != nil {
		t.Errorf("NetworkPolicy %s rendered with networkPolicy.enabled=false", np.Name)
	}
}

// The masters' probes, run as the kubelet would (sh -c, with the
// container's REDISCLI_AUTH) against a real redis-server that requires the
// password: liveness and readiness pass on a serving master; both fail
// with a wrong password or no master; and while a master loads its data
// (it answers PING with LOADING, as redis-server 7 does) liveness passes
// and readiness fails, so a long load is neither killed nor sent traffic.
func TestChartRedisProbes(t *testing.T) {
	if _, err := exec.LookPath("redis-cli"); err != nil {
		t.Skip("no redis-cli (make redis-server installs it)")
	}
	r, err := render(loadChart(t), nil, releaseName)
	if err != nil {
		t.Fatal(err)
	}
	m, _ := checkMasters(t, r.objs, releaseNS)
	c := redisContainer(m.sts)
	if c.LivenessProbe == nil || c.ReadinessProbe == nil || c.StartupProbe == nil {
		t.Fatal("masters without startup, liveness and readiness probes")
	}
	live, ready := c.LivenessProbe.Exec.Command, c.ReadinessProbe.Exec.Command
	if strings.Join(live, " ") == strings.Join(ready, " ") {
		t.Errorf("liveness and readiness run the same command: %q", live)
	}
	if strings.Join(c.StartupProbe.Exec.Command, " ") != strings.Join(live, " ") {
		t.Errorf("startup probe %q: want the liveness command (a load may follow the restart delay)", c.StartupProbe.Exec.Command)
	}
	authFromSecret := false
	for _, e := range c.Env {
		if e.Name == "REDISCLI_AUTH" && e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			authFromSecret = true
		}
	}
	if !authFromSecret {
		t.Fatal("the probes' redis-cli gets no password (REDISCLI_AUTH from the Secret)")
	}

	const password = "probe-test-password"
	srv := redistest.Start(t, redistest.WithArgs("--requirepass", password))
	loading := startLoadingRedis(t)
	down := freeAddr(t)
	for _, tc := range []struct {
		name, addr, password string
		live, ready          bool
	}{
		{"serving", srv.Addr(), password, true, true},
		{"wrong password", srv.Addr(), "not-it", false, false},
		{"no master", down, password, false, false},
		{"loading", loading, password, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := runProbe(t, live, tc.addr, tc.password); got != tc.live {
				t.Errorf("liveness passes: %v, want %v", got, tc.live)
			}
			if got := runProbe(t, ready, tc.addr, tc.password); got != tc.ready {
				t.Errorf("readiness passes: %v, want %v", got, tc.ready)
			}
		})
	}
}

// runProbe runs an exec probe's command with its target moved from the
// container's 127.0.0.1:6379 to addr.
func runProbe(t *testing.T, command []string, addr, password string) bool {
	t.Helper()
	host, port, _ := net.SplitHostPort(addr)
	const target = "-h 127.0.0.1 -p 6379"
	if !strings.Contains(strings.Join(command, " "), target) {
		t.Fatalf("probe %q does not target %s", command, target)
	}
	args := make([]string, len(command))
	for i, a := range command {
		args[i] = strings.ReplaceAll(a, target, "-h "+host+" -p "+port)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.Env = append(os.Environ(), "REDISCLI_AUTH="+password)
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("probe %q hung: %s", args, out)
	}
	return err == nil
}

// startLoadingRedis serves the Redis protocol on loopback as a master does
// while it loads its data set: AUTH is accepted, every other command is
// answered with the LOADING error (what redis-server 7.0 answers PING with
// during a load, checked by hand: the load of a large RDB cannot be timed
// reliably in a test).
func startLoadingRedis(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go answerLoading(conn)
		}
	}()
	return ln.Addr().String()
}

// answerLoading answers RESP commands (arrays of bulk strings) until the
// client hangs up.
func answerLoading(conn net.Conn) {
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	rd := bufio.NewReader(conn)
	for range 100 { // redis-cli sends AUTH and PING; bound the loop anyway
		line, err := rd.ReadString('\n')
		if err != nil || !strings.HasPrefix(line, "*") {
			return
		}
		n, err := strconv.Atoi(strings.TrimSpace(line[1:]))
		if err != nil {
			return
		}
		var words []string
		for i := 0; i < n && i < 64; i++ {
			if _, err := rd.ReadString('\n'); err != nil { // $len
				return
			}
			w, err := rd.ReadString('\n')
			if err != nil {
				return
			}
			words = append(words, strings.TrimSpace(w))
		}
		reply := "-LOADING Redis is loading the dataset in memory\r\n"
		if len(words) > 0 && strings.EqualFold(words[0], "AUTH") {
			reply = "+OK\r\n"
		}
		if _, err := conn.Write([]byte(reply)); err != nil {
			return
		}
	}
}

// freeAddr is a loopback address nobody listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}
