package e2e

import (
	"context"
	"testing"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The masters' password reaches the sidecars' namespaces (a secretKeyRef
// reads only its pod's own), through real `helm install`, `helm upgrade`
// and `helm uninstall` against the real API server, where `lookup` sees
// the installed Secret and the namespaces' labels: a listed namespace and
// one labelled sidelock-injection=enabled get a copy holding the
// original's password at install; a namespace labelled after the install
// gets its copy at the next upgrade, which keeps the password everywhere;
// uninstall leaves the copies (redis.auth.copyTo.keep).
func TestPasswordCopiedToSidecarNamespaces(t *testing.T) {
	ctx := context.Background()
	const ns, rel = "copy-home", "copies"
	const listed, optedIn, later = "copy-listed", "copy-opted-in", "copy-labelled-later"
	optInLabel := map[string]string{"sidelock-injection": "enabled"}
	ensureNamespace(t, ns)
	ensureNamespace(t, listed)
	ensureLabelledNamespace(t, optedIn, optInLabel)
	ensureNamespace(t, later)
	secretName := rel + "-sidelock-redis-auth"
	t.Cleanup(func() { deleteSecretEverywhere(t, secretName) })

	cfgHelm := helmConfig(t, ns)
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	// The injector is on (the opted-in namespaces' copies depend on it),
	// but Ignore: its Service has no endpoints here (no kubelet), and pods
	// other tests create in opted-in namespaces must still be admitted.
	vals, err := chartutil.ReadValues([]byte("injector: {failurePolicy: Ignore}\nredis: {auth: {copyTo: {namespaces: [" + listed + "]}}}"))
	if err != nil {
		t.Fatal(err)
	}
	helmInstall(t, cfgHelm, ch, rel, ns, vals)
	t.Cleanup(func() { _, _ = action.NewUninstall(cfgHelm).Run(rel) })

	original := password(t, ns, secretName)
	if len(original) < 32 {
		t.Fatalf("installed password of %d characters", len(original))
	}
	checkCopy(t, listed, secretName, original)
	checkCopy(t, optedIn, secretName, original)
	if _, err := clientset.CoreV1().Secrets(later).Get(ctx, secretName, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("a namespace neither listed nor labelled has a copy (%v)", err)
	}

	labelled, err := clientset.CoreV1().Namespaces().Get(ctx, later, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	labelled.Labels = optInLabel
	if _, err := clientset.CoreV1().Namespaces().Update(ctx, labelled, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	helmUpgrade(t, cfgHelm, ch, rel, ns, vals)
	if got := password(t, ns, secretName); got != original {
		t.Fatal("helm upgrade changed the generated password")
	}
	for _, n := range []string{listed, optedIn, later} {
		checkCopy(t, n, secretName, original)
	}

	if _, err := action.NewUninstall(cfgHelm).Run(rel); err != nil {
		t.Fatalf("helm uninstall: %v", err)
	}
	for _, n := range []string{listed, optedIn, later} {
		checkCopy(t, n, secretName, original)
	}
}

// checkCopy: the namespace has the Secret under the name the sidecar reads,
// holding the original's password.
func checkCopy(t *testing.T, ns, name, want string) {
	t.Helper()
	if got := password(t, ns, name); got != want {
		t.Errorf("the copy in %s holds another password than the original", ns)
	}
}

// deleteSecretEverywhere removes the Secret and its copies, which the chart
// keeps on uninstall, from every namespace (other tests may have labelled
// namespaces for injection, and those got copies too).
func deleteSecretEverywhere(t *testing.T, name string) {
	ctx := context.Background()
	list, err := clientset.CoreV1().Secrets("").List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name})
	if err != nil {
		t.Errorf("listing the Secrets %s: %v", name, err)
		return
	}
	for _, s := range list.Items {
		if err := clientset.CoreV1().Secrets(s.Namespace).Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("deleting Secret %s/%s: %v", s.Namespace, name, err)
		}
	}
}
