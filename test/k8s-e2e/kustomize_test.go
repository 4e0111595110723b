package e2e

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// The plain manifests in k8s/ (kustomize build) are accepted by the API
// server too. Their namespace is created for real first: a dry-run
// Namespace does not exist for the objects that go in it.
func TestKustomizeManifestsServerSideDryRun(t *testing.T) {
	ctx := context.Background()
	rm, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), "../../k8s")
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, res := range rm.Resources() {
		js, err := res.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(js, nil, nil)
		if err != nil {
			t.Fatalf("%s: %v", res.CurId(), err)
		}
		if ns, ok := obj.(*corev1.Namespace); ok {
			ensureNamespace(t, ns.Name)
			continue
		}
		o := obj.(client.Object)
		if err := c.Create(ctx, o, client.DryRunAll); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Errorf("%s: %v", res.CurId(), err)
		}
	}
}
