package deploy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	kjson "sigs.k8s.io/json"

	"github.com/sidelock/sidelock/internal/injector"
)

// Helpers that run the injector (internal/injector, the code `sidelock
// injector` serves) on the chart's own spec, speaking to it in the
// Kubernetes API types, and apply its patch with the JSON-patch library the
// API server uses. This is how a rendered chart is checked end to end
// without a cluster: the sidecar of an injected pod is what the API server
// would store.

// injectorSpecOf returns the spec the chart renders into the injector's
// ConfigMap, as the injector parses it.
func injectorSpecOf(t *testing.T, objs []object) (*injector.Spec, []byte) {
	t.Helper()
	var found []*corev1.ConfigMap
	for _, cm := range ofType[*corev1.ConfigMap](objs) {
		if _, ok := cm.Data["sidecar.json"]; ok {
			found = append(found, cm)
		}
	}
	if len(found) != 1 {
		t.Fatalf("want 1 ConfigMap with sidecar.json, found %d", len(found))
	}
	data := []byte(found[0].Data["sidecar.json"])
	spec, err := injector.ParseSpec(data)
	if err != nil {
		t.Fatalf("ConfigMap %s: the injector refuses the spec: %v", found[0].Name, err)
	}
	return spec, data
}

// admit sends pod (created in ns) to the injector as the API server would
// and returns the answer, strictly decoded into the admission/v1 types.
func admit(t *testing.T, spec *injector.Spec, pod *corev1.Pod, ns string, dryRun bool) (*admissionv1.AdmissionResponse, []byte) {
	t.Helper()
	inj, err := injector.New(injector.Config{Spec: spec})
	if err != nil {
		t.Fatal(err)
	}
	pod = pod.DeepCopy()
	pod.APIVersion, pod.Kind = "v1", "Pod"
	raw, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	review := admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID:         types.UID("705ab4f5-6393-11e8-b7cc-42010a800002"),
			Kind:        metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
			Resource:    metav1.GroupVersionResource{Version: "v1", Resource: "pods"},
			RequestKind: &metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
			Namespace:   ns,
			Name:        pod.Name,
			Operation:   admissionv1.Create,
			Object:      runtime.RawExtension{Raw: raw},
			DryRun:      &dryRun,
			Options:     runtime.RawExtension{Raw: []byte(`{"apiVersion":"meta.k8s.io/v1","kind":"CreateOptions"}`)},
		},
	}
	review.Request.UserInfo.Username = "system:serviceaccount:kube-system:replicaset-controller"
	body, err := json.Marshal(review)
	if err != nil {
		t.Fatal(err)
	}
	out, status := inj.Handle(body)
	if status != http.StatusOK {
		t.Fatalf("HTTP %d: %s", status, out)
	}
	var answer admissionv1.AdmissionReview
	if err := strictJSON(out, &answer); err != nil {
		t.Fatalf("the answer is not a strict admission/v1 AdmissionReview: %v\n%s", err, out)
	}
	if answer.APIVersion != "admission.k8s.io/v1" || answer.Kind != "AdmissionReview" || answer.Request != nil || answer.Response == nil {
		t.Fatalf("answer %s", out)
	}
	if answer.Response.UID != review.Request.UID {
		t.Errorf("uid %q, want %q", answer.Response.UID, review.Request.UID)
	}
	return answer.Response, raw
}

// injectPod returns pod as the API server stores it after the injector's
// patch (which must apply).
func injectPod(t *testing.T, spec *injector.Spec, pod *corev1.Pod, ns string) (*corev1.Pod, *admissionv1.AdmissionResponse) {
	t.Helper()
	resp, raw := admit(t, spec, pod, ns, false)
	if !resp.Allowed {
		t.Fatalf("denied: %+v", resp.Result)
	}
	if len(resp.Patch) == 0 {
		return pod, resp
	}
	if resp.PatchType == nil || *resp.PatchType != admissionv1.PatchTypeJSONPatch {
		t.Fatalf("patchType %v", resp.PatchType)
	}
	patch, err := jsonpatch.DecodePatch(resp.Patch)
	if err != nil {
		t.Fatalf("patch: %v", err)
	}
	patched, err := patch.Apply(raw)
	if err != nil {
		t.Fatalf("patch does not apply: %v\n%s", err, resp.Patch)
	}
	obj, err := decodeStrict(patched)
	if err != nil {
		t.Fatalf("patched pod: %v", err)
	}
	return obj.(*corev1.Pod), resp
}

// strictJSON decodes like the API server: unknown, duplicate or mis-cased
// fields are errors.
func strictJSON(data []byte, v any) error {
	strictErrs, err := kjson.UnmarshalStrict(data, v)
	if err == nil && len(strictErrs) > 0 {
		err = fmt.Errorf("%v", strictErrs)
	}
	return err
}

func isInjectable(p *corev1.Pod) bool {
	return p.Labels[injector.InjectLabel] == "true"
}

// podFor returns an opted-in pod with an application container.
func podFor(annotations map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: "web-0", Labels: map[string]string{injector.InjectLabel: "true", "app": "web"}, Annotations: annotations,
		},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "web:1"}}},
	}
}

// injectedSidecar returns the sidelock container the injector adds to an
// opted-in pod in the release namespace, and the pod.
func injectedSidecar(t *testing.T, objs []object, annotations map[string]string) (corev1.Container, *corev1.Pod) {
	t.Helper()
	spec, _ := injectorSpecOf(t, objs)
	pod, _ := injectPod(t, spec, podFor(annotations), releaseNS)
	if n := len(pod.Spec.InitContainers); n != 1 {
		t.Fatalf("%d init containers after injection, want 1", n)
	}
	if pod.Annotations[injector.StatusAnnotation] != injector.StatusInjected {
		t.Errorf("no %s annotation", injector.StatusAnnotation)
	}
	return pod.Spec.InitContainers[0], pod
}

// The injector's request and response types speak admission/v1: a
// request built with k8s.io/api decodes into them field for field, and
// their answers (patch, denial, warnings) decode strictly into k8s.io/api.
func TestInjectorSpeaksAdmissionV1(t *testing.T) {
	r, err := render(loadChart(t), nil, releaseName)
	if err != nil {
		t.Fatal(err)
	}
	spec, _ := injectorSpecOf(t, r.objs)
	pod := podFor(map[string]string{"sidelock.io/log-level": "debug"})
	pod.Namespace = releaseNS
	raw, _ := json.Marshal(pod)
	dry := true
	review := admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID: "u-1", Kind: metav1.GroupVersionKind{Version: "v1", Kind: "Pod"}, Resource: metav1.GroupVersionResource{Version: "v1", Resource: "pods"},
			SubResource: "", Name: "web-0", Namespace: releaseNS, Operation: admissionv1.Create, Object: runtime.RawExtension{Raw: raw}, DryRun: &dry,
		},
	}
	body, _ := json.Marshal(review)
	got, err := injector.DecodeReview(body)
	if err != nil {
		t.Fatal(err)
	}
	want := &injector.AdmissionRequest{
		UID: "u-1", Kind: injector.GroupVersionKind{Version: "v1", Kind: "Pod"}, Resource: injector.GroupVersionResource{Version: "v1", Resource: "pods"},
		Name: "web-0", Namespace: releaseNS, Operation: "CREATE", Object: raw, DryRun: &dry,
	}
	gotJSON, _ := json.Marshal(got.Request)
	wantJSON, _ := json.Marshal(want)
	if !bytes.Equal(gotJSON, wantJSON) {
		t.Errorf("decoded request\n got %s\nwant %s", gotJSON, wantJSON)
	}

	// Allowed with a patch (dry run too), denied, allowed with a warning.
	if resp, _ := admit(t, spec, pod, releaseNS, true); !resp.Allowed || len(resp.Patch) == 0 {
		t.Errorf("dry run: %+v", resp)
	}
	resp, _ := admit(t, spec, podFor(map[string]string{"sidelock.io/max-ttl": "forever"}), releaseNS, false)
	if resp.Allowed || resp.Result == nil || resp.Result.Code != 422 || resp.Result.Reason != metav1.StatusReasonInvalid ||
		resp.Result.Status != metav1.StatusFailure || !strings.Contains(resp.Result.Message, "sidelock.io/max-ttl") {
		t.Errorf("denial: %+v", resp.Result)
	}
	taken := podFor(nil)
	taken.Spec.InitContainers = []corev1.Container{{Name: spec.ContainerName(), Image: "x"}}
	if resp, _ := admit(t, spec, taken, releaseNS, false); !resp.Allowed || len(resp.Warnings) != 1 || resp.Patch != nil {
		t.Errorf("name taken: %+v", resp)
	}
}

// Opted-in pods keep everything they had; the sidecar comes first among
// the init containers, and a second pass (reinvocation) changes nothing.
func TestInjectorPatchKeepsThePod(t *testing.T) {
	r, err := render(loadChart(t), nil, releaseName)
	if err != nil {
		t.Fatal(err)
	}
	spec, _ := injectorSpecOf(t, r.objs)
	pod := podFor(map[string]string{"team": "payments"})
	pod.Spec.InitContainers = []corev1.Container{{Name: "migrate", Image: "m:1"}}
	pod.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	got, _ := injectPod(t, spec, pod, releaseNS)
	if len(got.Spec.InitContainers) != 2 || got.Spec.InitContainers[0].Name != "sidelock" || got.Spec.InitContainers[1].Name != "migrate" {
		t.Errorf("init containers %v", got.Spec.InitContainers)
	}
	if got.Annotations["team"] != "payments" || got.Labels["app"] != "web" || len(got.Spec.Volumes) != 1 || len(got.Spec.Containers) != 1 {
		t.Errorf("pod changed beyond the sidecar: %+v", got.ObjectMeta)
	}
	again, resp := injectPod(t, spec, got, releaseNS)
	if resp.Patch != nil || len(again.Spec.InitContainers) != 2 {
		t.Errorf("second pass patched: %s", resp.Patch)
	}
}
