package e2e

import (
	"context"
	"path/filepath"
	"testing"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// The masters' generated password, through real `helm install`, `helm
// upgrade`, `helm uninstall` and a second install (Helm's SDK against the
// real API server, where `lookup` reads the installed Secret): the upgrade
// and the reinstall keep the password, so neither the masters nor the
// sidecars (which read it at start) fall out of step, and the uninstall
// leaves the Secret (helm.sh/resource-policy: keep).
func TestGeneratedPasswordKeptAcrossUpgradeAndReinstall(t *testing.T) {
	const ns, rel = "helm-upgrade", "keep"
	ensureNamespace(t, ns)
	cfgHelm := helmConfig(t, ns)
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	// No injector: its webhook would send the cluster's opted-in pods to a
	// Service without endpoints (there is no kubelet here).
	vals, err := chartutil.ReadValues([]byte("injector: {enabled: false}"))
	if err != nil {
		t.Fatal(err)
	}
	helmInstall(t, cfgHelm, ch, rel, ns, vals)
	secretName := rel + "-sidelock-redis-auth"
	t.Cleanup(func() {
		_, _ = action.NewUninstall(cfgHelm).Run(rel)
		_ = clientset.CoreV1().Secrets(ns).Delete(context.Background(), secretName, metav1.DeleteOptions{})
	})
	first := password(t, ns, secretName)
	if len(first) < 32 {
		t.Fatalf("installed password of %d characters", len(first))
	}

	helmUpgrade(t, cfgHelm, ch, rel, ns, vals)
	if got := password(t, ns, secretName); got != first {
		t.Fatal("helm upgrade changed the generated password")
	}

	if _, err := action.NewUninstall(cfgHelm).Run(rel); err != nil {
		t.Fatalf("helm uninstall: %v", err)
	}
	if got := password(t, ns, secretName); got != first {
		t.Fatal("helm uninstall did not keep the Secret with its password")
	}
	helmInstall(t, cfgHelm, ch, rel, ns, vals)
	if got := password(t, ns, secretName); got != first {
		t.Fatal("a reinstall replaced the kept password")
	}
}

// helmInstall installs ch as release rel in ns, as `helm install` does.
func helmInstall(t *testing.T, cfg *action.Configuration, ch *chart.Chart, rel, ns string, vals chartutil.Values) {
	t.Helper()
	install := action.NewInstall(cfg)
	install.ReleaseName, install.Namespace = rel, ns
	if _, err := install.Run(ch, vals); err != nil {
		t.Fatalf("helm install %s: %v", rel, err)
	}
}

// helmUpgrade upgrades release rel in ns to ch with vals, as `helm upgrade` does.
func helmUpgrade(t *testing.T, cfg *action.Configuration, ch *chart.Chart, rel, ns string, vals chartutil.Values) {
	t.Helper()
	upgrade := action.NewUpgrade(cfg)
	upgrade.Namespace = ns
	if _, err := upgrade.Run(rel, ch, vals); err != nil {
		t.Fatalf("helm upgrade %s: %v", rel, err)
	}
}

func password(t *testing.T, ns, name string) string {
	t.Helper()
	s, err := clientset.CoreV1().Secrets(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("Secret %s/%s: %v", ns, name, err)
	}
	return string(s.Data["password"])
}

// helmConfig is Helm's action configuration for the envtest API server,
// through a kubeconfig written from its rest.Config.
func helmConfig(t *testing.T, ns string) *action.Configuration {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["envtest"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
	kc.Contexts["envtest"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "envtest", Namespace: ns}
	kc.CurrentContext = "envtest"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	flags := genericclioptions.NewConfigFlags(false)
	flags.KubeConfig, flags.Namespace = &path, &ns
	ac := new(action.Configuration)
	if err := ac.Init(flags, ns, "secret", func(format string, v ...any) { t.Logf(format, v...) }); err != nil {
		t.Fatal(err)
	}
	return ac
}
