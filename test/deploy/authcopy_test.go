package deploy

import (
	"maps"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chartutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// A secretKeyRef reads only its own pod's namespace, so sidecars outside
// the release namespace need the masters' password there. The chart copies
// its Secret (redis.auth.copyTo): same name, same key, same password as
// the original, in the listed namespaces and in those labelled for
// injection when it is installed or upgraded.

// passwordCopies returns the copies of the masters' password Secret by
// namespace, and fails on two in one namespace.
func passwordCopies(t *testing.T, objs []object) map[string]*corev1.Secret {
	t.Helper()
	copies := map[string]*corev1.Secret{}
	for _, s := range ofType[*corev1.Secret](objs) {
		if s.Labels["app.kubernetes.io/component"] != "redis-auth-copy" {
			continue
		}
		if s.Namespace == "" || s.Namespace == releaseNS {
			t.Errorf("copy of the password rendered into namespace %q, want one outside the release's", s.Namespace)
		}
		if copies[s.Namespace] != nil {
			t.Errorf("two copies of the password in namespace %s", s.Namespace)
		}
		copies[s.Namespace] = s
	}
	return copies
}

// checkCopies: exactly the namespaces in want have a copy, readable by the
// sidecar as it reads the original (name and key of its secretKeyRef),
// holding the original's password, annotated keep iff keep.
func checkCopies(t *testing.T, objs []object, want []string, keep bool) {
	t.Helper()
	original, password := generatedSecret(t, objs)
	sidecar, _ := injectedSidecar(t, objs, nil)
	var ref *corev1.SecretKeySelector
	for _, e := range sidecar.Env {
		if e.Name == "SIDELOCK_REDIS_PASSWORD" && e.ValueFrom != nil {
			ref = e.ValueFrom.SecretKeyRef
		}
	}
	if ref == nil || ref.Name != original.Name {
		t.Fatalf("the sidecar's SIDELOCK_REDIS_PASSWORD comes from %+v, want Secret %s", ref, original.Name)
	}
	copies := passwordCopies(t, objs)
	if got := slices.Sorted(maps.Keys(copies)); !slices.Equal(got, want) {
		t.Errorf("copies in namespaces %v, want %v", got, want)
	}
	for ns, c := range copies {
		if c.Name != ref.Name || string(c.Data[ref.Key]) != password {
			t.Errorf("copy in %s: Secret %s, key %s: want Secret %s holding the original's password under that key", ns, c.Name, ref.Key, ref.Name)
		}
		if got := c.Annotations["helm.sh/resource-policy"] == "keep"; got != keep {
			t.Errorf("copy in %s: annotations %v, want keep %v", ns, c.Annotations, keep)
		}
	}
}

// On a first install the password is generated in this very render: the
// copies must hold that one, not another draw. The release namespace in
// the list gets no second Secret (the original is there).
func TestChartCopiesThePasswordToListedNamespaces(t *testing.T) {
	r, err := render(loadChart(t), parseValues(t, "redis: {auth: {copyTo: {namespaces: [team-b, "+releaseNS+", team-a]}}}"), releaseName)
	if err != nil {
		t.Fatal(err)
	}
	checkCopies(t, r.objs, []string{"team-a", "team-b"}, true)
	if !strings.Contains(r.notes, "Copies made by this release: team-a, team-b.") {
		t.Errorf("NOTES.txt does not list the copies:\n%s", r.notes)
	}

	r, err = render(loadChart(t), parseValues(t, "redis: {auth: {password: s3cret, copyTo: {namespaces: [team-a], keep: false}}}"), releaseName)
	if err != nil {
		t.Fatal(err)
	}
	checkCopies(t, r.objs, []string{"team-a"}, false)

	// Without a cluster to look up (helm template), no labelled namespace
	// is known, and the default list is empty: the original alone.
	r, err = render(loadChart(t), nil, releaseName)
	if err != nil {
		t.Fatal(err)
	}
	checkCopies(t, r.objs, nil, true)

	// Auth off: no Secret, no copy.
	r, err = render(loadChart(t), parseValues(t, "redis: {auth: {enabled: false, copyTo: {namespaces: [team-a]}}}"), releaseName)
	if err != nil {
		t.Fatal(err)
	}
	if s := ofType[*corev1.Secret](r.objs); slices.ContainsFunc(s, func(s *corev1.Secret) bool { return strings.HasSuffix(s.Name, "-redis-auth") }) {
		t.Error("auth off renders a password Secret")
	}
}

func namespaceObj(name string, labels map[string]string, phase corev1.NamespacePhase) *corev1.Namespace {
	return &corev1.Namespace{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Status:     corev1.NamespaceStatus{Phase: phase},
	}
}

// On upgrade (and install) against a cluster, the namespaces labelled
// sidelock-injection: enabled get a copy holding the installed password,
// except kube-system, the excluded ones, those being deleted and the
// release's own; only while the injector injects by that label.
func TestChartCopiesThePasswordToOptedInNamespaces(t *testing.T) {
	r, err := render(loadChart(t), nil, releaseName)
	if err != nil {
		t.Fatal(err)
	}
	stored, _ := generatedSecret(t, r.objs)
	stored = stored.DeepCopy()
	stored.Namespace = releaseNS
	optIn := map[string]string{"sidelock-injection": "enabled"}
	cluster := []runtime.Object{
		stored,
		namespaceObj("shop", optIn, corev1.NamespaceActive),
		namespaceObj("billing", optIn, corev1.NamespaceActive),
		namespaceObj("plain", nil, corev1.NamespaceActive),
		namespaceObj("disabled", map[string]string{"sidelock-injection": "disabled"}, corev1.NamespaceActive),
		namespaceObj("leaving", optIn, corev1.NamespaceTerminating),
		namespaceObj("kube-system", optIn, corev1.NamespaceActive),
		namespaceObj("legacy", optIn, corev1.NamespaceActive),
		namespaceObj(releaseNS, optIn, corev1.NamespaceActive),
	}
	for _, tc := range []struct {
		name, values string
		want         []string
	}{
		{"defaults", "injector: {excludeNamespaces: [legacy]}", []string{"billing", "shop"}},
		{"with a list", "injector: {excludeNamespaces: [legacy]}\nredis: {auth: {copyTo: {namespaces: [team-a, shop]}}}", []string{"billing", "shop", "team-a"}},
		{"lookup off", "redis: {auth: {copyTo: {optedInNamespaces: false, namespaces: [team-a]}}}", []string{"team-a"}},
		{"namespace opt-in off", "injector: {namespaceOptIn: false}", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := renderUpgrade(t, parseValues(t, tc.values), cluster...)
			checkCopies(t, objs, tc.want, true)
			if _, pw := generatedSecret(t, objs); pw != string(stored.Data["password"]) {
				t.Error("the upgrade did not keep the installed password")
			}
		})
	}
	// Without the injector, the label injects nothing: nothing to copy.
	if c := passwordCopies(t, renderUpgrade(t, parseValues(t, "injector: {enabled: false}"), cluster...)); len(c) != 0 {
		t.Errorf("injector off: copies in %v", slices.Sorted(maps.Keys(c)))
	}
}

// A Secret of the user's (existingSecret) is not the chart's to copy: a
// copy list with it fails the render, saying what to do.
func TestChartRefusesToCopyAnExistingSecret(t *testing.T) {
	_, err := render(loadChart(t), parseValues(t, "redis: {auth: {existingSecret: mine, copyTo: {namespaces: [team-a]}}}"), releaseName)
	if err == nil || !strings.Contains(err.Error(), "redis.auth.copyTo") || !strings.Contains(err.Error(), "existingSecret") {
		t.Fatalf("render: %v, want a failure naming redis.auth.copyTo and existingSecret", err)
	}
	// The lookup default alone does not fail: it copies nothing.
	r, err := render(loadChart(t), parseValues(t, "redis: {auth: {existingSecret: mine}}"), releaseName)
	if err != nil {
		t.Fatal(err)
	}
	if c := passwordCopies(t, r.objs); len(c) != 0 {
		t.Errorf("copies of an existing Secret: %v", c)
	}
}

// The injector's warning for a pod outside the release namespace names the
// values that fix it; they must be values of this chart (the injector is
// built apart from it, so nothing else ties the two).
func TestInjectorWarningNamesChartValues(t *testing.T) {
	r, err := render(loadChart(t), nil, releaseName)
	if err != nil {
		t.Fatal(err)
	}
	spec, _ := injectorSpecOf(t, r.objs)
	resp, _ := admit(t, spec, podFor(nil), "team-a", false)
	if len(resp.Warnings) != 1 {
		t.Fatalf("warnings %v, want one about the password Secret", resp.Warnings)
	}
	defaults, err := chartutil.ReadValuesFile(filepath.Join(chartDir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	keys := regexp.MustCompile(`\b(?:redis|injector|sidecar)(?:\.[A-Za-z]+)+`).FindAllString(resp.Warnings[0], -1)
	if !slices.Contains(keys, "redis.auth.copyTo.namespaces") {
		t.Errorf("warning %q does not name redis.auth.copyTo.namespaces", resp.Warnings[0])
	}
	for _, k := range keys {
		if _, err := defaults.PathValue(k); err != nil {
			t.Errorf("warning names %s, which values.yaml does not have: %v", k, err)
		}
	}
}
