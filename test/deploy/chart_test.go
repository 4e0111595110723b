package deploy

import (
	"cmp"
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

const (
	chartDir       = "../../charts/sidelock"
	releaseName    = "shop"
	releaseNS      = "payments"
	minKubeVersion = "v1.29.0" // first with native sidecars on by default
)

// rendered is a chart rendered for one set of values.
type rendered struct {
	objs  []object
	notes string
}

// loadChart loads the chart afresh (rendering dependencies mutates it).
func loadChart(t *testing.T) *chart.Chart {
	t.Helper()
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

func parseValues(t *testing.T, valuesYAML string) map[string]any {
	t.Helper()
	vals, err := chartutil.ReadValues([]byte(valuesYAML))
	if err != nil {
		t.Fatalf("values: %v", err)
	}
	return vals
}

// render renders ch as `helm install` would on the oldest supported
// Kubernetes (schema validation included), in strict mode so that a
// template reading a value that does not exist fails, and decodes every
// manifest strictly.
func render(ch *chart.Chart, vals map[string]any, release string) (rendered, error) {
	var r rendered
	if err := chartutil.ProcessDependenciesWithMerge(ch, vals); err != nil {
		return r, err
	}
	caps := chartutil.DefaultCapabilities.Copy()
	kv, err := chartutil.ParseKubeVersion(minKubeVersion)
	if err != nil {
		return r, err
	}
	caps.KubeVersion = *kv
	opts := chartutil.ReleaseOptions{Name: release, Namespace: releaseNS, Revision: 1, IsInstall: true}
	top, err := chartutil.ToRenderValues(ch, vals, opts, caps)
	if err != nil {
		return r, err
	}
	files, err := engine.Engine{Strict: true}.Render(ch, top)
	if err != nil {
		return r, err
	}
	for _, name := range slices.Sorted(maps.Keys(files)) {
		content := files[name]
		switch {
		case path.Base(name) == "NOTES.txt":
			r.notes += content
		case strings.HasSuffix(name, ".tpl"):
			if strings.TrimSpace(content) != "" {
				return r, fmt.Errorf("%s renders output: %q", name, content)
			}
		default:
			objs, err := decodeStream(name, []byte(content))
			if err != nil {
				return r, err
			}
			r.objs = append(r.objs, objs...)
		}
	}
	return r, nil
}

// lintChart runs `helm lint --strict` with the values; warnings count.
func lintChart(t *testing.T, vals map[string]any) []support.Message {
	t.Helper()
	kv, err := chartutil.ParseKubeVersion(minKubeVersion)
	if err != nil {
		t.Fatal(err)
	}
	var bad []support.Message
	for _, m := range lint.AllWithKubeVersion(chartDir, vals, releaseNS, kv).Messages {
		if m.Severity >= support.WarningSev {
			bad = append(bad, m)
		}
	}
	return bad
}

// chartCase is one set of values and what it must produce.
type chartCase struct {
	name      string
	values    string
	release   string   // default releaseName
	masters   int      // in-chart masters; 0 when external
	external  []string // redis.externalAddrs
	groups    string   // SIDELOCK_REDIS_GROUPS from redis.externalGroups, exactly
	previous  string   // SIDELOCK_REDIS_GROUPS_PREVIOUS from redis.previousGroups, exactly
	readiness bool
	// persistence: "" (none) or the expected appendfsync.
	persistence  string
	antiAffinity string
	secret       string // Secret the passwords come from; "" without auth or with own masters' generated one
	secretExists bool   // that Secret is the user's, not rendered
	noAuth       bool   // own masters without a password (redis.auth.enabled=false)
}

var chartCases = []chartCase{
	{name: "defaults", masters: 3, readiness: true, antiAffinity: "hard"},
	{name: "one master", values: "redis: {masters: 1}", masters: 1, readiness: true, antiAffinity: "hard"},
	{name: "five soft", values: "redis: {masters: 5, antiAffinity: soft}", masters: 5, readiness: true, antiAffinity: "soft"},
	{name: "seven", values: "redis: {masters: 7}", masters: 7, readiness: true, antiAffinity: "hard"},
	{
		name: "external masters",
		values: `redis:
  enabled: false
  auth: {enabled: false}
  externalAddrs: [redis-a.example.com:6379, redis-b.example.com:6379, 10.0.0.7:6380]`,
		external:  []string{"redis-a.example.com:6379", "redis-b.example.com:6379", "10.0.0.7:6380"},
		readiness: true,
	},
	{
		name:    "persistence fsync always",
		values:  "redis: {persistence: {enabled: true, storageClass: fast, size: 2Gi}}",
		masters: 3, readiness: true, antiAffinity: "hard", persistence: "always",
	},
	{
		name:    "persistence everysec",
		values:  "redis: {persistence: {enabled: true, fsyncAlways: false}}",
		masters: 3, readiness: true, antiAffinity: "hard", persistence: "everysec",
	},
	{name: "no readiness probe", values: "sidecar: {readinessProbe: {enabled: false}}", masters: 3, antiAffinity: "hard"},
	{name: "no auth", values: "redis: {auth: {enabled: false}}", masters: 3, readiness: true, antiAffinity: "hard", noAuth: true},
	{
		name:    "auth with chart secret",
		values:  "redis: {auth: {enabled: true, password: s3cret}}",
		masters: 3, readiness: true, antiAffinity: "hard", secret: "shop-sidelock-redis-auth",
	},
	{
		name: "external with tls, acl user and existing secret",
		values: `redis:
  enabled: false
  externalAddrs: [redis-0.corp:6380]
  auth: {enabled: true, username: locks, existingSecret: corp-redis, existingSecretKey: pw}
  tls: {enabled: true, caFile: /etc/sidelock/ca/ca.crt, certFile: /etc/sidelock/ca/tls.crt, keyFile: /etc/sidelock/ca/tls.key}
sidecar:
  extraVolumeMounts: [{name: redis-ca, mountPath: /etc/sidelock/ca, readOnly: true}]
  extraVolumes: [{name: redis-ca, secret: {secretName: corp-redis-ca}}]`,
		external: []string{"redis-0.corp:6380"}, readiness: true, secret: "corp-redis", secretExists: true,
	},
	{
		name: "external quorum groups, named and unnamed",
		values: `redis:
  enabled: false
  auth: {enabled: false}
  externalGroups:
    - {name: east, addrs: [east-0.corp:6379, east-1.corp:6379, east-2.corp:6379]}
    - addrs: [west-2.corp:6379, west-0.corp:6379, west-1.corp:6379]
    - {name: eu_1.b-2, addrs: [10.0.0.9:6380]}
sidecar:
  config: {readyPolicy: any, redisMaxConns: 4}`,
		groups:    "east=east-0.corp:6379,east-1.corp:6379,east-2.corp:6379;west-2.corp:6379,west-0.corp:6379,west-1.corp:6379;eu_1.b-2=10.0.0.9:6380",
		readiness: true,
	},
	{
		name: "external quorum groups, migrating from one quorum",
		values: `redis:
  enabled: false
  externalGroups:
    - addrs: [a-0.corp:6379, a-1.corp:6379, a-2.corp:6379]
    - {name: b, addrs: [b-0.corp:6379, b-1.corp:6379, b-2.corp:6379]}
  previousGroups:
    - addrs: [a-2.corp:6379, a-1.corp:6379, a-0.corp:6379]
  auth: {enabled: true, username: locks, existingSecret: corp-redis}
  tls: {enabled: true}`,
		groups:    "a-0.corp:6379,a-1.corp:6379,a-2.corp:6379;b=b-0.corp:6379,b-1.corp:6379,b-2.corp:6379",
		previous:  "a-2.corp:6379,a-1.corp:6379,a-0.corp:6379",
		readiness: true, secret: "corp-redis", secretExists: true,
	},
	{
		name: "one external quorum, migrating from groups",
		values: `redis:
  enabled: false
  auth: {enabled: false}
  externalAddrs: [c-0.corp:6379, c-1.corp:6379, c-2.corp:6379]
  previousGroups:
    - {name: a, addrs: [a-0.corp:6379]}
    - {name: b, addrs: [b-0.corp:6379]}`,
		external: []string{"c-0.corp:6379", "c-1.corp:6379", "c-2.corp:6379"},
		previous: "a=a-0.corp:6379;b=b-0.corp:6379", readiness: true,
	},
	{
		name: "own masters, migrating from external groups",
		values: `redis:
  masters: 5
  maxClients: 30000
  previousGroups:
    - {name: a, addrs: [a-0.corp:6379, a-1.corp:6379, a-2.corp:6379]}`,
		masters: 5, previous: "a=a-0.corp:6379,a-1.corp:6379,a-2.corp:6379", readiness: true, antiAffinity: "hard",
	},
	{
		name:    "long release name",
		release: "a-release-name-as-long-as-helm-allows-53-characters-x",
		masters: 3, readiness: true, antiAffinity: "hard",
	},
	{
		name:    "release named like the chart",
		release: "sidelock",
		masters: 3, readiness: true, antiAffinity: "hard",
	},
}

func TestChartRendersValidManifests(t *testing.T) {
	for _, tc := range chartCases {
		t.Run(tc.name, func(t *testing.T) {
			vals := parseValues(t, tc.values)
			for _, m := range lintChart(t, vals) {
				t.Errorf("helm lint: %s", m)
			}
			release := cmp.Or(tc.release, releaseName)
			r, err := render(loadChart(t), vals, release)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(r.notes, "sidelock.sidecar") {
				t.Errorf("NOTES.txt does not explain how to include the sidecar:\n%s", r.notes)
			}
			for _, o := range r.objs {
				if ns := o.meta().GetNamespace(); ns != "" {
					t.Errorf("%s: namespace %q set; it comes from the release", o, ns)
				}
			}
			if tc.secret != "" && tc.secretExists {
				checkWorkloads(t, r.objs, tc.secret)
			} else {
				checkWorkloads(t, r.objs)
			}
			checkChartCase(t, tc, r.objs)
		})
	}
}

// checkChartCase checks what tc asks for: the masters (or their absence),
// the helm test pod and its sidecar.
func checkChartCase(t *testing.T, tc chartCase, objs []object) {
	t.Helper()
	m, ok := checkMasters(t, objs, releaseNS)
	wantAddrs := tc.external
	if tc.masters > 0 {
		if !ok {
			t.Fatal("no Redis masters rendered")
		}
		wantAddrs = m.addrs
		if n := int(*m.sts.Spec.Replicas); n != tc.masters {
			t.Errorf("%d masters, want %d", n, tc.masters)
		}
		if len(m.sts.Name) > 52 {
			t.Errorf("StatefulSet name %q is longer than 52 characters", m.sts.Name)
		}
		if m.antiAffinity != tc.antiAffinity {
			t.Errorf("anti-affinity %q, want %q", m.antiAffinity, tc.antiAffinity)
		}
		checkPersistence(t, tc.persistence, m)
		if tc.secret == "" && !tc.noAuth { // the chart's own, generated
			tc.secret = m.sts.Name + "-auth"
		}
	} else if ok {
		t.Fatalf("StatefulSet %s rendered with redis.enabled=false", m.sts.Name)
	}
	if len(wantAddrs) == 0 && tc.groups == "" {
		t.Fatal("test case expects no masters at all")
	}

	pod := helmTestPod(t, objs)
	c := checkSidecar(t, pod, sidecarWant{addrs: wantAddrs, groups: tc.groups, previous: tc.previous, readiness: tc.readiness})
	if ok {
		checkRestartDelay(t, m, keyTTL(t, c))
	}
	checkAuth(t, tc, objs, c, m)
}

func checkPersistence(t *testing.T, fsync string, m masters) {
	t.Helper()
	claims := m.sts.Spec.VolumeClaimTemplates
	appendonly := strings.Join(m.conf["appendonly"], "")
	switch {
	case fsync == "" && (len(claims) > 0 || appendonly != "no"):
		t.Errorf("persistence off, but %d claims and appendonly %q", len(claims), appendonly)
	case fsync != "" && (len(claims) != 1 || appendonly != "yes"):
		t.Errorf("persistence on, but %d claims and appendonly %q", len(claims), appendonly)
	case fsync != "" && strings.Join(m.conf["appendfsync"], "") != fsync:
		t.Errorf("appendfsync %q, want %q", m.conf["appendfsync"], fsync)
	}
}

// checkAuth: with auth on, the sidecar and every master read the password
// from the same Secret; without it, nobody reads one.
func checkAuth(t *testing.T, tc chartCase, objs []object, sidecar corev1.Container, m masters) {
	t.Helper()
	users := []corev1.Container{sidecar}
	if m.sts != nil {
		users = append(users, *redisContainer(m.sts))
	}
	for _, c := range users {
		var refs []string
		for _, e := range c.Env {
			if ref := secretRef(e); ref != "" {
				refs = append(refs, ref)
			}
		}
		if tc.secret == "" && len(refs) > 0 || tc.secret != "" && (len(refs) == 0 || slices.ContainsFunc(refs, func(r string) bool { return r != tc.secret })) {
			t.Errorf("container %s reads Secrets %v, want only %q", c.Name, refs, tc.secret)
		}
	}
	if rendered := named[*corev1.Secret](objs, tc.secret) != nil; tc.secret != "" && rendered == tc.secretExists {
		t.Errorf("Secret %s rendered: %v, want %v", tc.secret, rendered, !tc.secretExists)
	}
	if m.sts != nil {
		checkMastersAuth(t, m, tc.secret != "")
	}
}

// checkMastersAuth: with a password, the masters get it as an argument
// (never in their ConfigMap) and keep protected mode on, which refuses
// every client but loopback should the password ever come empty; without
// one, protected mode is off (or no pod could connect) and the
// NetworkPolicy alone keeps them apart.
func checkMastersAuth(t *testing.T, m masters, auth bool) {
	t.Helper()
	cmd := strings.Join(redisContainer(m.sts).Command, " ")
	if got := strings.Contains(cmd, `--requirepass "$REDIS_PASSWORD"`); got != auth {
		t.Errorf("redis-server started with --requirepass: %v, want %v (%s)", got, auth, cmd)
	}
	if _, ok := m.conf["requirepass"]; ok {
		t.Error("redis.conf (a ConfigMap) holds the password")
	}
	if got, want := strings.Join(m.conf["protected-mode"], " "), map[bool]string{true: "yes", false: "no"}[auth]; got != want {
		t.Errorf("protected-mode %q with auth %v, want %q", got, auth, want)
	}
}

// helmTestPod returns the `helm test` pod as it runs: when it opts in to
// injection (the injector is on), as the injector, given the chart's own
// sidecar spec, changes it; otherwise as rendered, with the sidecar from
// the named template.
func helmTestPod(t *testing.T, objs []object) workload {
	t.Helper()
	for _, w := range workloads(objs) {
		pod, ok := w.obj.(*corev1.Pod)
		if !ok || w.meta().GetAnnotations()["helm.sh/hook"] != "test" {
			continue
		}
		if w.spec.RestartPolicy != corev1.RestartPolicyNever {
			t.Errorf("%s: restartPolicy %q, want Never (the pod must complete)", w, w.spec.RestartPolicy)
		}
		if !isInjectable(pod) {
			return w
		}
		if len(pod.Spec.InitContainers) > 0 {
			t.Errorf("%s: opts in to injection but has init containers already", w)
		}
		spec, _ := injectorSpecOf(t, objs)
		injected, _ := injectPod(t, spec, pod, releaseNS)
		w = workloads([]object{{source: w.source + " (injected)", obj: injected}})[0]
		for _, c := range w.containers() {
			for _, m := range c.VolumeMounts {
				if !slices.ContainsFunc(w.spec.Volumes, func(v corev1.Volume) bool { return v.Name == m.Name }) {
					t.Errorf("%s container %s: mount of unknown volume %s", w, c.Name, m.Name)
				}
			}
		}
		return w
	}
	t.Fatal("no helm test pod")
	return workload{}
}

// The masters' addresses have the documented form
// <release>-sidelock-redis-<i>.<release>-sidelock-redis-headless.<ns>.svc.cluster.local:6379.
func TestChartMasterAddresses(t *testing.T) {
	r, err := render(loadChart(t), nil, releaseName)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for i := range 3 {
		want = append(want, fmt.Sprintf("shop-sidelock-redis-%d.shop-sidelock-redis-headless.payments.svc.cluster.local:6379", i))
	}
	checkSidecar(t, helmTestPod(t, r.objs), sidecarWant{addrs: want, readiness: true})
}

// Bad values must be refused before anything is rendered, by the schema.
func TestChartRejectsBadValues(t *testing.T) {
	cases := []struct{ name, values, want string }{
		{"unknown top-level key", "replicas: 3", "replicas"},
		{"unknown nested key", "sidecar: {readinessProbe: {enable: false}}", "enable"},
		{"even number of masters", "redis: {masters: 2}", "/redis/masters"},
		{"too many masters", "redis: {masters: 9}", "/redis/masters"},
		{"masters as a string", `redis: {masters: "3"}`, "/redis/masters"},
		{"bool as a string", `redis: {enabled: "false", externalAddrs: [a:1]}`, "/redis/enabled"},
		{"duration without unit", "sidecar: {config: {nodeTimeout: 50}}", "/sidecar/config/nodeTimeout"},
		{"bad duration", "sidecar: {config: {keyTTL: ten-seconds}}", "/sidecar/config/keyTTL"},
		{"bad log level", "sidecar: {config: {logLevel: verbose}}", "/sidecar/config/logLevel"},
		{"external without addresses", "redis: {enabled: false}", "/redis/externalAddrs"},
		{"external addresses with own masters", "redis: {externalAddrs: ['a:6379']}", "/redis/externalAddrs"},
		{"duplicate external addresses", "redis: {enabled: false, externalAddrs: ['a:6379', 'a:6379']}", "/redis/externalAddrs"},
		{"address without port", "redis: {enabled: false, externalAddrs: [redis-a]}", "/redis/externalAddrs/0"},
		{"password in an address", "redis: {enabled: false, externalAddrs: ['S3cr3t@redis-a:6379']}", "/redis/externalAddrs/0"},
		{"URL in an address", "redis: {enabled: false, externalAddrs: ['redis://:S3cr3t@redis-a:6379']}", "/redis/externalAddrs/0"},
		{"key prefix with #", "sidecar: {config: {keyPrefix: 'sidelock:victim#'}}", "/sidecar/config/keyPrefix"},
		{"tls to own masters", "redis: {tls: {enabled: true}}", "/redis/tls/enabled"},
		{"client cert without key", "redis: {enabled: false, externalAddrs: ['a:6379'], tls: {enabled: true, certFile: /c}}", "/redis/tls/keyFile"},
		{"drift factor too large", "sidecar: {config: {driftFactor: 0.5}}", "/sidecar/config/driftFactor"},
		{"acl user on own masters", "redis: {auth: {enabled: true, password: x, username: bob}}", "/redis/auth/username"},
		{"lock API port out of range", "sidecar: {listenPort: 70000}", "/sidecar/listenPort"},
		{"bad anti-affinity", "redis: {antiAffinity: maybe}", "/redis/antiAffinity"},
		{"bad resource quantity", "sidecar: {resources: {limits: {memory: lots}}}", "/sidecar/resources/limits/memory"},
		{"unknown resource", "sidecar: {resources: {limits: {gpu: 1}}}", "gpu"},
		{"bad ready policy", "sidecar: {config: {readyPolicy: most}}", "/sidecar/config/readyPolicy"},
		{"one connection per master", "sidecar: {config: {redisMaxConns: 1}}", "/sidecar/config/redisMaxConns"},
		{"65 connections per master", "sidecar: {config: {redisMaxConns: 65}}", "/sidecar/config/redisMaxConns"},
		{"connections as a string", `sidecar: {config: {redisMaxConns: "4"}}`, "/sidecar/config/redisMaxConns"},
		{"no clients", "redis: {maxClients: 0}", "/redis/maxClients"},
		{"external without addresses or groups", "redis: {enabled: false, externalAddrs: [], externalGroups: []}", "/redis/externalGroups"},
		{"group name with a space", "redis: {enabled: false, externalGroups: [{name: 'east 1', addrs: ['a:6379']}]}", "/redis/externalGroups/0/name"},
		{"group name starting with a dash", "redis: {enabled: false, externalGroups: [{name: -east, addrs: ['a:6379']}]}", "/redis/externalGroups/0/name"},
		{"group name of 65 characters", "redis: {enabled: false, externalGroups: [{name: " + strings.Repeat("g", 65) + ", addrs: ['a:6379']}]}", "/redis/externalGroups/0/name"},
		{"empty group name", "redis: {enabled: false, externalGroups: [{name: '', addrs: ['a:6379']}]}", "/redis/externalGroups/0/name"},
		{"group without masters", "redis: {enabled: false, externalGroups: [{name: east, addrs: []}]}", "/redis/externalGroups/0/addrs"},
		{"group without addrs", "redis: {enabled: false, externalGroups: [{name: east}]}", "missing property 'addrs'"},
		{"unknown key in a group", "redis: {enabled: false, externalGroups: [{name: east, addrs: ['a:6379'], weight: 2}]}", "additional properties 'weight' not allowed"},
		{"group as a string", "redis: {enabled: false, externalGroups: ['east=a:6379,b:6379']}", "/redis/externalGroups/0"},
		{"master twice in a group", "redis: {enabled: false, externalGroups: [{addrs: ['a:6379', 'a:6379']}]}", "/redis/externalGroups/0/addrs"},
		{"separator in a group address", "redis: {enabled: false, externalGroups: [{addrs: ['a:6379;b:6379']}]}", "/redis/externalGroups/0/addrs/0"},
		{"name in a group address", "redis: {enabled: false, externalGroups: [{addrs: ['east=a:6379']}]}", "/redis/externalGroups/0/addrs/0"},
		{"unknown key in a previous group", "redis: {enabled: false, externalAddrs: ['a:6379'], previousGroups: [{addr: ['b:6379']}]}", "additional properties 'addr' not allowed"},
		{"bad previous group name", "redis: {enabled: false, externalAddrs: ['a:6379'], previousGroups: [{name: 'a/b', addrs: ['b:6379']}]}", "/redis/previousGroups/0/name"},
		{"copy to a bad namespace name", "redis: {auth: {copyTo: {namespaces: [Team_A]}}}", "/redis/auth/copyTo/namespaces/0"},
		{"copy to a namespace twice", "redis: {auth: {copyTo: {namespaces: [team-a, team-a]}}}", "/redis/auth/copyTo/namespaces"},
		{"copy list as a string", "redis: {auth: {copyTo: {namespaces: team-a}}}", "/redis/auth/copyTo/namespaces"},
		{"unknown key in copyTo", "redis: {auth: {copyTo: {namespace: [team-a]}}}", "additional properties 'namespace' not allowed"},
		{"previous groups as a map", "redis: {enabled: false, externalAddrs: ['a:6379'], previousGroups: {east: ['b:6379']}}", "/redis/previousGroups"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			vals := parseValues(t, tc.values)
			_, err := render(loadChart(t), vals, releaseName)
			if err == nil {
				t.Fatal("rendered; want a schema error")
			}
			if !strings.Contains(err.Error(), "values don't meet the specifications of the schema") || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("want a schema error about %q, got: %v", tc.want, err)
			}
			if len(lintChart(t, vals)) == 0 {
				t.Error("helm lint accepts the values")
			}
		})
	}
}

// The chart needs native sidecars, i.e. Kubernetes >= 1.29.
func TestChartKubeVersion(t *testing.T) {
	constraint := loadChart(t).Metadata.KubeVersion
	for ver, want := range map[string]bool{minKubeVersion: true, "v1.33.1": true, "v1.28.15": false, "v1.29.0-eks-1": true} {
		if got := chartutil.IsCompatibleRange(constraint, ver); got != want {
			t.Errorf("kubeVersion %q allows %s: %v, want %v", constraint, ver, got, want)
		}
	}
}

// parentChart is an application chart that depends on sidelock and adds the
// sidecar to its Deployment the way NOTES.txt and the README tell users to.
func parentChart(t *testing.T) *chart.Chart {
	t.Helper()
	const deployment = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ .Release.Name }}-web
spec:
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      initContainers:
        - {{- include "sidelock.sidecar" .Subcharts.sidelock | nindent 10 }}
      containers:
        - name: web
          image: web:1
          resources:
            requests: {cpu: 100m, memory: 64Mi}
            limits: {memory: 128Mi}
          securityContext:
            runAsNonRoot: true
            readOnlyRootFilesystem: true
            allowPrivilegeEscalation: false
            capabilities: {drop: [ALL]}
            seccompProfile: {type: RuntimeDefault}
`
	sidelock := loadChart(t)
	parent := &chart.Chart{
		Metadata: &chart.Metadata{
			APIVersion: chart.APIVersionV2, Name: "web", Version: "1.0.0",
			Dependencies: []*chart.Dependency{{Name: "sidelock", Version: sidelock.Metadata.Version}},
		},
		Templates: []*chart.File{{Name: "templates/deployment.yaml", Data: []byte(deployment)}},
		Values:    map[string]any{},
	}
	parent.AddDependency(sidelock)
	return parent
}

// A parent chart includes the sidecar with its values and gets the masters
// of the same release; its values for sidelock are checked by our schema.
func TestChartAsDependency(t *testing.T) {
	vals := parseValues(t, `
global: {imageRegistry: example.com}
sidelock:
  redis: {masters: 5}
  sidecar: {readinessProbe: {enabled: false}, config: {logLevel: debug}}`)
	r, err := render(parentChart(t), vals, releaseName)
	if err != nil {
		t.Fatal(err)
	}
	checkWorkloads(t, r.objs)
	m, ok := checkMasters(t, r.objs, releaseNS)
	if !ok || len(m.addrs) != 5 {
		t.Fatalf("want 5 masters from the subchart, got %v", m.addrs)
	}
	web := named[*appsv1.Deployment](r.objs, releaseName+"-web")
	if web == nil {
		t.Fatal("no web Deployment")
	}
	c := checkSidecar(t, workloads([]object{{source: "web", obj: web}})[0], sidecarWant{addrs: m.addrs})
	if lvl, _ := env(c, "SIDELOCK_LOG_LEVEL"); lvl != "debug" {
		t.Errorf("SIDELOCK_LOG_LEVEL=%q, want the parent's debug", lvl)
	}

	if _, err := render(parentChart(t), parseValues(t, "sidelock: {redis: {masters: 4}}"), releaseName); err == nil {
		t.Error("parent values for sidelock bypass its schema")
	}
}
