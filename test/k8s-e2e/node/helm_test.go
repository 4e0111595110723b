package node

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/release"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
)

const (
	chartDir = "../../../charts/sidelock"
	// The release every scenario but the Unix socket's and the restart
	// guard's uses: injector on, masters with persistence.
	releaseNS, releaseName = "sidelock", "locks"
	// The second release: masters without persistence, the sidecar on a
	// Unix socket, no injector (its pods include the sidecar themselves).
	plainNS, plainName = "sidelock-plain", "plain"
	storageClass       = "e2e-local"
	// Timing kept short so the scenarios are quick; restartDelaySeconds
	// stays above keyTTL as the chart requires.
	keyTTL              = 4 * time.Second
	restartDelaySeconds = 6
)

// valuesFor are the chart values of a release on this node: this run's
// images (never pulled: there is no registry), one node (soft
// anti-affinity), short timing.
func valuesFor(persistent, injector, unixSocket bool) map[string]any {
	repo, tag, _ := splitRef(e2e.tools)
	tools := map[string]any{"repository": repo, "tag": tag, "pullPolicy": "Never"}
	persistence := map[string]any{"enabled": persistent}
	if persistent {
		persistence["storageClass"] = storageClass
	}
	return map[string]any{
		"image": map[string]any{"repository": e2e.sidecar, "tag": e2e.tag, "pullPolicy": "Never"},
		"tests": map[string]any{"image": tools},
		"sidecar": map[string]any{
			"unixSocket": unixSocket,
			"config":     map[string]any{"keyTTL": keyTTL.String(), "logFormat": "json"},
		},
		"injector": map[string]any{"enabled": injector, "replicas": 2},
		"redis": map[string]any{
			"image":               tools,
			"antiAffinity":        "soft",
			"restartDelaySeconds": restartDelaySeconds,
			"persistence":         persistence,
		},
	}
}

// helmConfig is Helm's action configuration for the cluster, in ns.
func helmConfig(ns string) (*action.Configuration, error) {
	kc := e2e.cluster.Kubeconfig
	flags := genericclioptions.NewConfigFlags(false)
	flags.KubeConfig, flags.Namespace = &kc, &ns
	ac := new(action.Configuration)
	quiet := func(string, ...any) {}
	return ac, ac.Init(flags, ns, "secret", quiet)
}

// helmAction is Helm's configuration for ns and the chart of this tree.
func helmAction(ns string) (*action.Configuration, *chart.Chart, error) {
	cfg, err := helmConfig(ns)
	if err != nil {
		return nil, nil, err
	}
	ch, err := loader.Load(chartDir)
	return cfg, ch, err
}

// install runs `helm install --create-namespace --wait` for a release.
func install(ctx context.Context, ns, name string, vals map[string]any) (*release.Release, error) {
	cfg, ch, err := helmAction(ns)
	if err != nil {
		return nil, err
	}
	in := action.NewInstall(cfg)
	in.ReleaseName, in.Namespace, in.CreateNamespace = name, ns, true
	in.Wait, in.Timeout = true, 5*time.Minute
	return in.RunWithContext(ctx, ch, chartutil.Values(vals))
}

// upgrade runs `helm upgrade --wait` with vals.
func upgrade(ctx context.Context, ns, name string, vals map[string]any) (*release.Release, error) {
	cfg, ch, err := helmAction(ns)
	if err != nil {
		return nil, err
	}
	up := action.NewUpgrade(cfg)
	up.Namespace, up.Wait, up.Timeout = ns, true, 5*time.Minute
	return up.RunWithContext(ctx, name, ch, chartutil.Values(vals))
}

// installReleases installs both releases, the masters' volumes first.
func installReleases(ctx context.Context) error {
	if err := makeVolumes(ctx, 3); err != nil {
		return err
	}
	began := time.Now()
	if _, err := install(ctx, releaseNS, releaseName, valuesFor(true, true, false)); err != nil {
		return fmt.Errorf("helm install %s: %w", releaseName, err)
	}
	if _, err := install(ctx, plainNS, plainName, valuesFor(false, false, true)); err != nil {
		return fmt.Errorf("helm install %s: %w", plainName, err)
	}
	e2e.helmTime = time.Since(began)
	return nil
}

// makeVolumes makes a StorageClass without a provisioner and n hostPath
// PersistentVolumes in it for the masters' claims: the node has no
// dynamic provisioner, and the volumes outlive the master pods.
func makeVolumes(ctx context.Context, n int) error {
	bind := storagev1.VolumeBindingWaitForFirstConsumer
	sc := &storagev1.StorageClass{
		ObjectMeta:        metav1.ObjectMeta{Name: storageClass},
		Provisioner:       "kubernetes.io/no-provisioner",
		VolumeBindingMode: &bind,
	}
	if _, err := kube().StorageV1().StorageClasses().Create(ctx, sc, metav1.CreateOptions{}); err != nil {
		return err
	}
	for i := range n {
		dir := filepath.Join(e2e.cluster.Dir, "volumes", fmt.Sprint(i))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		// The masters run as the redis user, 999 (hostPath ignores fsGroup).
		if err := os.Chown(dir, 999, 999); err != nil {
			return err
		}
		pv := &corev1.PersistentVolume{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("e2e-master-%d", i)},
			Spec: corev1.PersistentVolumeSpec{
				Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
				AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
				StorageClassName:              storageClass,
				PersistentVolumeSource: corev1.PersistentVolumeSource{
					HostPath: &corev1.HostPathVolumeSource{Path: dir},
				},
			},
		}
		if _, err := kube().CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	return nil
}
