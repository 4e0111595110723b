package e2e

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/sidelock/sidelock/internal/injector"
)

// The tests run one real control plane (etcd and kube-apiserver, built
// from the Go module proxy by tools/build.sh into .cache/bin) through
// controller-runtime's envtest. There is no scheduler, controller manager
// or kubelet: pods are stored, never run.

const (
	release   = "shop"
	namespace = "payments" // the release's
)

var (
	cfg       *rest.Config
	clientset *kubernetes.Clientset
)

// assetsDir holds the etcd and kube-apiserver binaries.
func assetsDir() string {
	if d := os.Getenv("KUBEBUILDER_ASSETS"); d != "" {
		return d
	}
	d, _ := filepath.Abs(".cache/bin")
	return d
}

func TestMain(m *testing.M) {
	dir := assetsDir()
	for _, bin := range []string{"etcd", "kube-apiserver"} {
		if _, err := os.Stat(filepath.Join(dir, bin)); err != nil {
			fmt.Fprintf(os.Stderr, "SKIP: no %s in %s: build them with tools/build.sh (make e2e does)\n", bin, dir)
			os.Exit(0)
		}
	}
	started := time.Now()
	env := &envtest.Environment{BinaryAssetsDirectory: dir, ControlPlaneStartTimeout: 2 * time.Minute}
	var err error
	if cfg, err = env.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "starting the control plane: %v\n", err)
		os.Exit(1)
	}
	fmt.Fprintf(os.Stderr, "control plane up in %v\n", time.Since(started).Round(time.Millisecond))
	clientset = kubernetes.NewForConfigOrDie(cfg)
	code := m.Run()
	if err := env.Stop(); err != nil {
		fmt.Fprintf(os.Stderr, "stopping the control plane: %v\n", err)
	}
	os.Exit(code)
}

// webhookServer is the injector serving HTTPS on loopback, with a
// certificate from a throwaway CA.
type webhookServer struct {
	url    string
	ca     []byte
	server *http.Server

	mu    sync.Mutex
	calls map[string]int // injector calls by pod name
}

// counting counts the injector's calls per pod.
func (s *webhookServer) counting(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var review struct {
			Request struct {
				Object struct {
					Metadata struct{ Name string }
				}
			}
		}
		_ = json.Unmarshal(body, &review)
		s.mu.Lock()
		s.calls[review.Request.Object.Metadata.Name]++
		s.mu.Unlock()
		r.Body = io.NopCloser(bytes.NewReader(body))
		next.ServeHTTP(w, r)
	})
}

func (s *webhookServer) callsFor(pod string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[pod]
}

func startWebhook(t *testing.T, spec *injector.Spec) *webhookServer {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "e2e webhook CA"}, IsCA: true, BasicConstraintsValid: true,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	inj, err := injector.New(injector.Config{Spec: spec, Logger: slog.New(slog.NewTextHandler(testWriter{t}, nil))})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	s := &webhookServer{calls: map[string]int{}}
	mux.Handle("POST /mutate", s.counting(inj))
	mux.HandleFunc("POST /label", addLabel)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.url = "https://" + ln.Addr().String() + "/mutate"
	s.ca = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	s.server = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, TLSConfig: &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}},
	}}
	go func() { _ = s.server.ServeTLS(ln, "", "") }()
	t.Cleanup(func() { s.server.Close() })
	return s
}

// addLabel is another mutating webhook: it labels every pod, which makes
// the API server call the injector again (reinvocationPolicy IfNeeded).
func addLabel(w http.ResponseWriter, r *http.Request) {
	var review injector.AdmissionReview
	if err := json.NewDecoder(r.Body).Decode(&review); err != nil || review.Request == nil {
		http.Error(w, "bad review", http.StatusBadRequest)
		return
	}
	pt := injector.PatchTypeJSONPatch
	review.Response = &injector.AdmissionResponse{
		UID: review.Request.UID, Allowed: true, PatchType: &pt,
		Patch: []byte(`[{"op":"add","path":"/metadata/labels/relabelled","value":"yes"}]`),
	}
	review.Request = nil
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(review)
}

// installLabeller installs addLabel as a webhook that runs after the
// injector (webhooks run in the order of their configurations' names).
func installLabeller(t *testing.T, srv *webhookServer) {
	t.Helper()
	url := strings.TrimSuffix(srv.url, "/mutate") + "/label"
	none, never := admissionregistrationv1.SideEffectClassNone, admissionregistrationv1.NeverReinvocationPolicy
	mwc := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "zz-labeller"},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name: "label.e2e.sidelock.io", AdmissionReviewVersions: []string{"v1"}, SideEffects: &none, ReinvocationPolicy: &never,
			ClientConfig:   admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: srv.ca},
			ObjectSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"relabel": "true"}},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}},
			}},
		}},
	}
	if _, err := clientset.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(context.Background(), mwc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = clientset.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(context.Background(), mwc.Name, metav1.DeleteOptions{})
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		p, err := clientset.CoreV1().Pods(namespace).Create(context.Background(), testPod("probe", map[string]string{"relabel": "true"}, nil), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err == nil && p.Labels["relabelled"] == "yes" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the labeller is not called after 30s (last: %v)", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// testWriter sends the injector's log to the test's.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func ensureNamespace(t *testing.T, name string) {
	t.Helper()
	_, err := clientset.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

func testPod(name string, labels, annotations map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, Annotations: annotations},
		Spec: corev1.PodSpec{
			InitContainers: []corev1.Container{{Name: "migrate", Image: "migrate:1"}},
			Containers:     []corev1.Container{{Name: "web", Image: "web:1", Ports: []corev1.ContainerPort{{ContainerPort: 8080}}}},
		},
	}
}

var optIn = map[string]string{injector.InjectLabel: "true", "app": "web"}

// installWebhook installs the chart's MutatingWebhookConfiguration, its
// clientConfig pointed at the test's server instead of the Service (there
// is no cluster network here), and waits until the API server calls it.
func installWebhook(t *testing.T, mwc *admissionregistrationv1.MutatingWebhookConfiguration, srv *webhookServer) {
	t.Helper()
	ctx := context.Background()
	mwc = mwc.DeepCopy()
	mwc.Name += "-e2e" // the chart's own is dry-run created by TestRenderedManifestsServerSideDryRun
	for i := range mwc.Webhooks {
		mwc.Webhooks[i].ClientConfig = admissionregistrationv1.WebhookClientConfig{URL: &srv.url, CABundle: srv.ca}
	}
	created, err := clientset.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, mwc, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = clientset.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(context.Background(), created.Name, metav1.DeleteOptions{})
	})
	// The API server loads webhook configurations asynchronously.
	deadline := time.Now().Add(30 * time.Second)
	for {
		p, err := clientset.CoreV1().Pods(namespace).Create(ctx, testPod("probe", optIn, nil), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err == nil && p.Annotations[injector.StatusAnnotation] == injector.StatusInjected {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the webhook is not called after 30s (last: %v)", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// The injector, installed with the chart's webhook configuration, gives an
// opted-in pod the native sidecar the chart's named template renders, and
// leaves every other pod as it was.
func TestInjectorAgainstAPIServer(t *testing.T) {
	ctx := context.Background()
	r := renderChart(t, "")
	spec, want := sidecarSpec(t, r)
	ensureNamespace(t, namespace)
	ensureNamespace(t, "legacy")
	srv := startWebhook(t, spec)
	installWebhook(t, webhookConfig(t, r), srv)
	pods := clientset.CoreV1().Pods(namespace)

	// Opted in: stored with the sidecar first among the init containers.
	created, err := pods.Create(ctx, testPod("with-locks", optIn, map[string]string{"team": "payments"}), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	stored, err := pods.Get(ctx, created.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(stored.Spec.InitContainers); n != 2 || stored.Spec.InitContainers[0].Name != want.Name || stored.Spec.InitContainers[1].Name != "migrate" {
		t.Fatalf("stored init containers %v, want [%s migrate]", containerNames(stored.Spec.InitContainers), want.Name)
	}
	checkStoredSidecar(t, stored.Spec.InitContainers[0], want)
	if stored.Annotations[injector.StatusAnnotation] != injector.StatusInjected || stored.Annotations["team"] != "payments" {
		t.Errorf("annotations %v", stored.Annotations)
	}
	if len(stored.Spec.Containers) != 1 || stored.Spec.Containers[0].Name != "web" {
		t.Errorf("containers %v", containerNames(stored.Spec.Containers))
	}

	// Not opted in, in an excluded or system namespace, the injector's own
	// pods, already injected: stored as sent.
	injected := map[string]string{injector.StatusAnnotation: injector.StatusInjected}
	own := map[string]string{injector.InjectLabel: "true", injector.ComponentLabel: injector.ComponentInjector}
	for _, tc := range []struct {
		ns          string
		pod         *corev1.Pod
		annotations map[string]string
	}{
		{namespace, testPod("no-label", map[string]string{"app": "web"}, nil), nil},
		{namespace, testPod("label-false", map[string]string{injector.InjectLabel: "false"}, nil), nil},
		{"kube-system", testPod("system", optIn, nil), nil},
		{namespace, testPod("injector-itself", own, nil), nil},
		{namespace, testPod("already", optIn, injected), injected},
	} {
		got, err := clientset.CoreV1().Pods(tc.ns).Create(ctx, tc.pod, metav1.CreateOptions{})
		if err != nil {
			t.Errorf("%s/%s: %v", tc.ns, tc.pod.Name, err)
			continue
		}
		if names := containerNames(got.Spec.InitContainers); !slices.Equal(names, []string{"migrate"}) {
			t.Errorf("%s/%s: init containers %v, want it untouched", tc.ns, tc.pod.Name, names)
		}
		if !equality.Semantic.DeepEqual(got.Annotations, tc.annotations) {
			t.Errorf("%s/%s: annotations %v, want %v", tc.ns, tc.pod.Name, got.Annotations, tc.annotations)
		}
	}

	// Annotations tune the sidecar; bad ones are refused with the reason.
	tuned, err := pods.Create(ctx, testPod("tuned", optIn, map[string]string{
		"sidelock.io/default-ttl": "10s", "sidelock.io/readiness-probe": "false", "sidelock.io/memory-limit": "128Mi",
	}), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sc := tuned.Spec.InitContainers[0]
	if v := envValue(sc, "SIDELOCK_DEFAULT_TTL"); v != "10s" || sc.ReadinessProbe != nil || sc.Resources.Limits.Memory().String() != "128Mi" {
		t.Errorf("annotations not applied: ttl %q, readiness %v, limits %v", v, sc.ReadinessProbe, sc.Resources.Limits)
	}
	_, err = pods.Create(ctx, testPod("bad", optIn, map[string]string{"sidelock.io/default-ttl": "30"}), metav1.CreateOptions{})
	if err == nil || !strings.Contains(err.Error(), `admission webhook "inject.sidelock.io" denied the request`) || !strings.Contains(err.Error(), "sidelock.io/default-ttl") {
		t.Errorf("bad annotation: %v, want a denial naming it", err)
	}

	// Another webhook changes the pod after the injector: the API server
	// calls the injector again (IfNeeded), which must not inject twice.
	installLabeller(t, srv)
	relabelled, err := pods.Create(ctx, testPod("reinvoked", map[string]string{injector.InjectLabel: "true", "relabel": "true"}, nil), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if names := containerNames(relabelled.Spec.InitContainers); relabelled.Labels["relabelled"] != "yes" || !slices.Equal(names, []string{want.Name, "migrate"}) {
		t.Errorf("after reinvocation: labels %v, init containers %v, want one sidecar", relabelled.Labels, names)
	}
	if n := srv.callsFor("reinvoked"); n != 2 {
		t.Errorf("injector called %d times for the relabelled pod, want 2 (reinvoked once)", n)
	}
	if n := srv.callsFor("with-locks"); n != 1 {
		t.Errorf("injector called %d times for a pod nobody else changes, want 1", n)
	}

	// Server-side dry run: the answer is injected, nothing is stored.
	dry, err := pods.Create(ctx, testPod("dry", optIn, nil), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if err != nil || len(dry.Spec.InitContainers) != 2 {
		t.Errorf("dry run: %v, %v", err, dry)
	}
	if _, err := pods.Get(ctx, "dry", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("dry-run pod stored: %v", err)
	}

	// failurePolicy Fail: with no injector answering, opted-in pods are
	// refused, and every other pod is still admitted (objectSelector: the
	// API server does not even call the webhook for them).
	srv.server.Close()
	_, err = pods.Create(ctx, testPod("while-down", optIn, nil), metav1.CreateOptions{})
	if err == nil || !strings.Contains(err.Error(), `failed calling webhook "inject.sidelock.io"`) {
		t.Errorf("opted-in pod with the injector down: %v, want refused", err)
	}
	if _, err := pods.Create(ctx, testPod("other-while-down", nil, nil), metav1.CreateOptions{}); err != nil {
		t.Errorf("pod without the label, injector down: %v", err)
	}
}

func containerNames(cs []corev1.Container) []string {
	var names []string
	for _, c := range cs {
		names = append(names, c.Name)
	}
	return names
}

func envValue(c corev1.Container, name string) string {
	for _, e := range c.Env {
		if e.Name == name {
			return e.Value
		}
	}
	return ""
}

// checkStoredSidecar compares the sidecar the API server stored with the
// one the chart's named template renders. The API server adds defaults
// (terminationMessagePath, probe successThreshold, ...): those are
// compared only where the template sets them.
func checkStoredSidecar(t *testing.T, got, want corev1.Container) {
	t.Helper()
	if got.RestartPolicy == nil || *got.RestartPolicy != corev1.ContainerRestartPolicyAlways {
		t.Error("stored sidecar is not a native sidecar (restartPolicy Always)")
	}
	for name, pair := range map[string][2]any{
		"image":           {got.Image, want.Image},
		"imagePullPolicy": {got.ImagePullPolicy, want.ImagePullPolicy},
		"env":             {got.Env, want.Env},
		"ports":           {got.Ports, want.Ports},
		"resources":       {got.Resources, want.Resources},
		"securityContext": {got.SecurityContext, want.SecurityContext},
		"volumeMounts":    {got.VolumeMounts, want.VolumeMounts},
		"startupProbe":    {probeTarget(got.StartupProbe), probeTarget(want.StartupProbe)},
		"readinessProbe":  {probeTarget(got.ReadinessProbe), probeTarget(want.ReadinessProbe)},
		"livenessProbe":   {probeTarget(got.LivenessProbe), probeTarget(want.LivenessProbe)},
	} {
		if !equality.Semantic.DeepEqual(pair[0], pair[1]) {
			t.Errorf("stored sidecar %s:\n got %+v\nwant %+v", name, pair[0], pair[1])
		}
	}
}

// probeTarget is what a probe checks and how often, without the fields the
// API server defaults.
func probeTarget(p *corev1.Probe) any {
	if p == nil || p.HTTPGet == nil {
		return p
	}
	return fmt.Sprintf("GET %s on %s every %ds, timeout %ds, %d failures",
		p.HTTPGet.Path, p.HTTPGet.Port.String(), p.PeriodSeconds, p.TimeoutSeconds, p.FailureThreshold)
}
