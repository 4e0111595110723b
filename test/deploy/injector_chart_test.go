package deploy

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/sidelock/sidelock/internal/injector"
)

// injectorWant is what the injector's objects must say for some values.
type injectorWant struct {
	replicas      int32
	failurePolicy admissionregistrationv1.FailurePolicyType
	timeout       int32
	exclude       []string // never injected; kube-system first
	port          int32
	certManager   bool
	issuer        cmObjectReference // certManager: expected issuerRef of the serving certificate
	noNamespaces  bool              // injector.namespaceOptIn off: the pod label is the only way in
}

var defaultInjector = injectorWant{
	replicas: 2, failurePolicy: admissionregistrationv1.Fail, timeout: 5, exclude: []string{"kube-system"}, port: 8443,
}

// The namespace label that opts every pod of a namespace in.
var optedInNamespace = labels.Set{"sidelock-injection": "enabled"}

// injectorObjs are the injector's rendered objects.
type injectorObjs struct {
	deploy  *appsv1.Deployment
	svc     *corev1.Service
	sa      *corev1.ServiceAccount
	webhook *admissionregistrationv1.MutatingWebhookConfiguration
	secret  *corev1.Secret // the serving certificate, unless cert-manager makes it
	pod     corev1.PodSpec
	c       corev1.Container
}

// findInjector returns the injector's objects, or ok=false if none of them
// is rendered (any one alone fails the test).
func findInjector(t *testing.T, objs []object) (o injectorObjs, ok bool) {
	t.Helper()
	hooks := ofType[*admissionregistrationv1.MutatingWebhookConfiguration](objs)
	var deploys []*appsv1.Deployment
	for _, d := range ofType[*appsv1.Deployment](objs) {
		if d.Spec.Template.Labels[injector.ComponentLabel] == injector.ComponentInjector {
			deploys = append(deploys, d)
		}
	}
	if len(hooks) == 0 && len(deploys) == 0 {
		for _, o := range objs {
			if o.meta().GetLabels()["app.kubernetes.io/component"] == "injector" {
				t.Errorf("%s rendered without the injector", o)
			}
		}
		return o, false
	}
	if len(hooks) != 1 || len(deploys) != 1 {
		t.Fatalf("%d MutatingWebhookConfigurations and %d injector Deployments, want 1 each", len(hooks), len(deploys))
	}
	o.webhook, o.deploy = hooks[0], deploys[0]
	o.pod = o.deploy.Spec.Template.Spec
	if len(o.pod.Containers) != 1 || len(o.pod.InitContainers) != 0 {
		t.Fatalf("injector pod: want one container")
	}
	o.c = o.pod.Containers[0]
	o.sa = named[*corev1.ServiceAccount](objs, o.pod.ServiceAccountName)
	if o.sa == nil {
		t.Fatalf("no ServiceAccount %q", o.pod.ServiceAccountName)
	}
	if len(o.webhook.Webhooks) > 0 && o.webhook.Webhooks[0].ClientConfig.Service != nil {
		o.svc = named[*corev1.Service](objs, o.webhook.Webhooks[0].ClientConfig.Service.Name)
	}
	for _, v := range o.pod.Volumes {
		if v.Secret != nil {
			o.secret = named[*corev1.Secret](objs, v.Secret.SecretName)
		}
	}
	return o, true
}

// checkInjector checks the injector's Deployment, Service, account,
// disruption budget, certificate and webhook configuration against want.
func checkInjector(t *testing.T, objs []object, want injectorWant) injectorObjs {
	t.Helper()
	o, ok := findInjector(t, objs)
	if !ok {
		t.Fatal("no injector rendered")
	}
	checkWebhook(t, o, want)
	checkInjectorDeployment(t, objs, o, want)
	checkInjectorService(t, o)

	// It never calls the API server: no token, no RBAC at all.
	if o.sa.AutomountServiceAccountToken == nil || *o.sa.AutomountServiceAccountToken {
		t.Errorf("ServiceAccount %s mounts a token", o.sa.Name)
	}
	for _, obj := range objs {
		switch obj.obj.(type) {
		case *rbacv1.Role, *rbacv1.RoleBinding, *rbacv1.ClusterRole, *rbacv1.ClusterRoleBinding:
			t.Errorf("%s: the injector needs no RBAC", obj)
		}
	}
	pdbs := ofType[*policyv1.PodDisruptionBudget](objs)
	pdb := slices.IndexFunc(pdbs, func(p *policyv1.PodDisruptionBudget) bool {
		return selects(t, "PodDisruptionBudget "+p.Name, p.Spec.Selector, o.deploy.Spec.Template.Labels)
	})
	if (pdb >= 0) != (want.replicas > 1) {
		t.Errorf("injector PodDisruptionBudget rendered: %v, with %d replicas", pdb >= 0, want.replicas)
	}

	if want.certManager {
		checkCertManager(t, objs, o, want)
	} else {
		checkServingCert(t, o)
	}
	return o
}

// checkWebhook checks the webhook entries: one per way in (the pod label;
// the namespace label, unless want.noNamespaces), each alike but for its
// selectors, and together sending exactly the pods that opt in, each by
// one entry only.
func checkWebhook(t *testing.T, o injectorObjs, want injectorWant) {
	t.Helper()
	wantNames := []string{"inject.sidelock.io", "namespace.inject.sidelock.io"}
	if want.noNamespaces {
		wantNames = wantNames[:1]
	}
	var names []string
	for _, h := range o.webhook.Webhooks {
		names = append(names, h.Name)
		checkWebhookEntry(t, o, h, want)
	}
	if !slices.Equal(names, wantNames) {
		t.Fatalf("webhooks %v, want %v", names, wantNames)
	}
	if !strings.HasSuffix(o.webhook.Name, "-"+releaseNS) {
		t.Errorf("webhook %s: cluster-scoped, so its name must carry the namespace", o.webhook.Name)
	}
	checkWebhookSelectors(t, o, want)
}

func checkWebhookEntry(t *testing.T, o injectorObjs, h admissionregistrationv1.MutatingWebhook, want injectorWant) {
	t.Helper()
	where := "webhook " + o.webhook.Name + "/" + h.Name
	wantRules := []admissionregistrationv1.RuleWithOperations{{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
		Rule: admissionregistrationv1.Rule{
			APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"},
			Scope: ptr(admissionregistrationv1.NamespacedScope),
		},
	}}
	switch {
	case !slices.Equal(h.AdmissionReviewVersions, []string{"v1"}):
		t.Errorf("%s: admissionReviewVersions %v, want [v1] (what the injector speaks)", where, h.AdmissionReviewVersions)
	case h.SideEffects == nil || *h.SideEffects != admissionregistrationv1.SideEffectClassNone:
		t.Errorf("%s: sideEffects %v, want None", where, h.SideEffects)
	case h.ReinvocationPolicy == nil || *h.ReinvocationPolicy != admissionregistrationv1.IfNeededReinvocationPolicy:
		t.Errorf("%s: reinvocationPolicy %v, want IfNeeded", where, h.ReinvocationPolicy)
	case h.FailurePolicy == nil || *h.FailurePolicy != want.failurePolicy:
		t.Errorf("%s: failurePolicy %v, want %s", where, h.FailurePolicy, want.failurePolicy)
	case h.TimeoutSeconds == nil || *h.TimeoutSeconds != want.timeout:
		t.Errorf("%s: timeoutSeconds %v, want %d", where, h.TimeoutSeconds, want.timeout)
	case h.MatchPolicy == nil || *h.MatchPolicy != admissionregistrationv1.Equivalent:
		t.Errorf("%s: matchPolicy %v, want Equivalent", where, h.MatchPolicy)
	case !equality.Semantic.DeepEqual(h.Rules, wantRules):
		t.Errorf("%s: rules %+v, want pod CREATE only", where, h.Rules)
	case h.ObjectSelector == nil || h.NamespaceSelector == nil:
		t.Errorf("%s: objectSelector %v, namespaceSelector %v: both needed", where, h.ObjectSelector, h.NamespaceSelector)
	}
	svc := h.ClientConfig.Service
	switch {
	case h.ClientConfig.URL != nil || svc == nil:
		t.Fatalf("%s: clientConfig must name the Service", where)
	case o.svc == nil || svc.Name != o.svc.Name:
		t.Fatalf("%s: no Service %s rendered", where, svc.Name)
	case svc.Namespace != releaseNS || svc.Path == nil || *svc.Path != "/mutate" || svc.Port == nil || *svc.Port != 443:
		t.Errorf("%s: clientConfig.service %s/%s port %v path %v, want %s, 443, /mutate", where, svc.Namespace, svc.Name, svc.Port, svc.Path, releaseNS)
	}
}

// checkWebhookSelectors: over pods and namespaces labelled every way, the
// entries send a pod to the injector exactly when it opts in (the pod
// label "true" anywhere; in an opted-in namespace, anything but "false"),
// never the injector's own pods nor those of excluded namespaces, and
// never by two entries (the API server would call the injector twice).
func checkWebhookSelectors(t *testing.T, o injectorObjs, want injectorWant) {
	t.Helper()
	own := labels.Set(maps.Clone(o.deploy.Spec.Template.Labels))
	pods := []labels.Set{
		{injector.InjectLabel: "true", "app": "web"}, {"app": "web"}, {injector.InjectLabel: "false"},
		{injector.InjectLabel: "yes"}, {}, own, labels.Merge(own, labels.Set{injector.InjectLabel: "true"}),
	}
	for _, ns := range append([]string{releaseNS, "default", "shop"}, want.exclude...) {
		for _, nsLabels := range []labels.Set{{corev1.LabelMetadataName: ns}, labels.Merge(optedInNamespace, labels.Set{corev1.LabelMetadataName: ns})} {
			for _, pod := range pods {
				excluded := slices.Contains(want.exclude, ns) || pod[injector.ComponentLabel] == injector.ComponentInjector
				nsOptIn := !want.noNamespaces && optedInNamespace.AsSelector().Matches(nsLabels)
				wantSent := !excluded && (pod[injector.InjectLabel] == "true" || nsOptIn && pod[injector.InjectLabel] != "false")
				var by []string
				for _, h := range o.webhook.Webhooks {
					if matchesSelector(t, h.ObjectSelector, pod) && matchesSelector(t, h.NamespaceSelector, nsLabels) {
						by = append(by, h.Name)
					}
				}
				if len(by) > 1 || (len(by) == 1) != wantSent {
					t.Errorf("pod labels %v in namespace %v: sent by %v, want by one entry: %v", pod, nsLabels, by, wantSent)
				}
			}
		}
	}
}

func matchesSelector(t *testing.T, sel *metav1.LabelSelector, set labels.Set) bool {
	t.Helper()
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		t.Fatalf("selector %v: %v", sel, err)
	}
	return s.Matches(set)
}

func checkInjectorService(t *testing.T, o injectorObjs) {
	t.Helper()
	where := "Service " + o.svc.Name
	if !selects(t, where, &metav1.LabelSelector{MatchLabels: o.svc.Spec.Selector}, o.deploy.Spec.Template.Labels) || len(o.svc.Spec.Selector) == 0 {
		t.Errorf("%s: selector %v does not select the injector's pods", where, o.svc.Spec.Selector)
	}
	if len(o.svc.Spec.Ports) != 1 || o.svc.Spec.Ports[0].Port != 443 {
		t.Fatalf("%s: ports %+v, want 443", where, o.svc.Spec.Ports)
	}
	target := o.svc.Spec.Ports[0].TargetPort
	if p := portNamed(o.c, target.String()); p == 0 && target.IntVal == 0 {
		t.Errorf("%s: targetPort %s is no port of the injector", where, target.String())
	}
}

// injectorEnvNames are the SIDELOCK_INJECTOR_* variables `sidelock
// injector` reads: the names given to env(...) in cmd/sidelock/injector.go
// (parsed, not imported: package main).
func injectorEnvNames(t *testing.T) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(binaryDir, "injector.go"), nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	ast.Inspect(f, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok || len(call.Args) == 0 {
			return true
		}
		if id, ok := call.Fun.(*ast.Ident); ok && id.Name == "env" {
			if lit, ok := call.Args[0].(*ast.BasicLit); ok && lit.Kind == token.STRING {
				s, _ := strconv.Unquote(lit.Value)
				names = append(names, "SIDELOCK_INJECTOR_"+s)
			}
		}
		return true
	})
	if len(names) < 4 {
		t.Fatalf("found only %v in injector.go: where did the settings go?", names)
	}
	return names
}

func checkInjectorDeployment(t *testing.T, objs []object, o injectorObjs, want injectorWant) {
	t.Helper()
	d, c := o.deploy, o.c
	where := "Deployment " + d.Name
	if d.Spec.Replicas == nil || *d.Spec.Replicas != want.replicas {
		t.Errorf("%s: replicas %v, want %d", where, d.Spec.Replicas, want.replicas)
	}
	if !selects(t, where+" selector", d.Spec.Selector, d.Spec.Template.Labels) {
		t.Errorf("%s: selector does not match its pods", where)
	}
	if ru := d.Spec.Strategy.RollingUpdate; ru == nil || ru.MaxUnavailable == nil || ru.MaxUnavailable.IntValue() != 0 {
		t.Errorf("%s: a rollout may take every injector down (maxUnavailable must be 0)", where)
	}
	if !slices.Equal(c.Args, []string{"injector"}) || len(c.Command) > 0 {
		t.Errorf("%s: runs %v %v, want the image's entrypoint with [injector]", where, c.Command, c.Args)
	}
	if spec, _ := injectorSpecOf(t, objs); c.Image != sidecarImage(t, spec) {
		t.Errorf("%s: image %s, want the sidecar's (one image)", where, c.Image)
	}
	if isTrue(o.pod.AutomountServiceAccountToken) || o.pod.AutomountServiceAccountToken == nil {
		t.Errorf("%s: mounts a service account token it does not need", where)
	}
	for _, a := range []string{"checksum/sidecar"} {
		if d.Spec.Template.Annotations[a] == "" {
			t.Errorf("%s: no %s annotation: a new spec would not restart the injector", where, a)
		}
	}
	if _, ok := d.Spec.Template.Annotations["checksum/tls"]; ok == want.certManager {
		t.Errorf("%s: checksum/tls annotation present: %v, with cert-manager: %v", where, ok, want.certManager)
	}

	known := injectorEnvNames(t)
	set := map[string]string{}
	for _, e := range c.Env {
		if !slices.Contains(known, e.Name) {
			t.Errorf("%s: sets %s, which sidelock injector does not read (it reads %v)", where, e.Name, known)
		}
		set[e.Name] = e.Value
	}
	for _, name := range []string{"LISTEN_ADDR", "TLS_CERT_FILE", "TLS_KEY_FILE", "SIDECAR_SPEC", "EXCLUDE_NAMESPACES", "LOG_FORMAT"} {
		if set["SIDELOCK_INJECTOR_"+name] == "" {
			t.Errorf("%s: SIDELOCK_INJECTOR_%s not set", where, name)
		}
	}
	if got := set["SIDELOCK_INJECTOR_EXCLUDE_NAMESPACES"]; got != strings.Join(want.exclude, ",") {
		t.Errorf("%s: excludes %q, the webhook %v", where, got, want.exclude)
	}
	https := portNamed(c, "https")
	if _, port := addrPort(set["SIDELOCK_INJECTOR_LISTEN_ADDR"]); port != https || https != want.port {
		t.Errorf("%s: listens on %s, containerPort https %d, want %d", where, set["SIDELOCK_INJECTOR_LISTEN_ADDR"], https, want.port)
	}
	for _, p := range []struct {
		probe *corev1.Probe
		path  string
	}{{c.StartupProbe, "/healthz"}, {c.LivenessProbe, "/healthz"}, {c.ReadinessProbe, "/readyz"}} {
		if p.probe == nil || p.probe.HTTPGet == nil || p.probe.HTTPGet.Path != p.path || p.probe.HTTPGet.Scheme != corev1.URISchemeHTTPS || p.probe.HTTPGet.Port.String() != "https" {
			t.Errorf("%s: want HTTPS probes on port https (%s)", where, p.path)
		}
	}

	// The files it is told to read are in the volumes it mounts.
	fileIn := func(path string) (corev1.Volume, string) {
		for _, m := range c.VolumeMounts {
			if rel, ok := strings.CutPrefix(path, strings.TrimSuffix(m.MountPath, "/")+"/"); ok {
				if !m.ReadOnly {
					t.Errorf("%s: mount %s is writable", where, m.Name)
				}
				for _, v := range o.pod.Volumes {
					if v.Name == m.Name {
						return v, rel
					}
				}
			}
		}
		t.Errorf("%s: %s is in no mounted volume", where, path)
		return corev1.Volume{}, ""
	}
	if v, key := fileIn(set["SIDELOCK_INJECTOR_SIDECAR_SPEC"]); v.ConfigMap != nil {
		if cm := named[*corev1.ConfigMap](objs, v.ConfigMap.Name); cm == nil || cm.Data[key] == "" {
			t.Errorf("%s: the spec file %s is not in ConfigMap %s", where, key, v.ConfigMap.Name)
		}
	} else {
		t.Errorf("%s: the spec does not come from a ConfigMap", where)
	}
	for _, f := range []string{"SIDELOCK_INJECTOR_TLS_CERT_FILE", "SIDELOCK_INJECTOR_TLS_KEY_FILE"} {
		v, key := fileIn(set[f])
		if v.Secret == nil || !slices.Contains([]string{"tls.crt", "tls.key"}, key) {
			t.Errorf("%s: %s is not tls.crt/tls.key of a Secret", where, f)
		}
	}
}

// sidecarImage is the image of the spec's container.
func sidecarImage(t *testing.T, s *injector.Spec) string {
	t.Helper()
	var c corev1.Container
	if err := json.Unmarshal(s.Container, &c); err != nil {
		t.Fatal(err)
	}
	return c.Image
}

// checkServingCert: the chart's generated certificate is served for the
// name the API server calls, and the webhook's caBundle trusts it.
func checkServingCert(t *testing.T, o injectorObjs) {
	t.Helper()
	if o.secret == nil {
		t.Fatal("no serving certificate Secret rendered")
	}
	if o.secret.Type != corev1.SecretTypeTLS {
		t.Errorf("Secret %s: type %s", o.secret.Name, o.secret.Type)
	}
	bundle := o.webhook.Webhooks[0].ClientConfig.CABundle
	if string(bundle) != string(o.secret.Data["ca.crt"]) {
		t.Errorf("caBundle is not the Secret's ca.crt")
	}
	verifyServing(t, bundle, o.secret.Data["tls.crt"], o.secret.Data["tls.key"], o.svc.Name+"."+releaseNS+".svc")
}

// verifyServing checks a certificate and key against a CA bundle for the
// DNS name the API server dials.
func verifyServing(t *testing.T, caBundle, certPEM, keyPEM []byte, dnsName string) {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caBundle) {
		t.Fatalf("caBundle holds no PEM certificate: %q", caBundle)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatalf("tls.crt/tls.key: %v", err)
	}
	if _, err := pair.Leaf.Verify(x509.VerifyOptions{DNSName: dnsName, Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		t.Errorf("serving certificate not valid for %s under the caBundle: %v", dnsName, err)
	}
}

func checkCertManager(t *testing.T, objs []object, o injectorObjs, want injectorWant) {
	t.Helper()
	h := o.webhook.Webhooks[0]
	if len(h.ClientConfig.CABundle) != 0 {
		t.Error("caBundle set; cert-manager's cainjector fills it")
	}
	if o.secret != nil {
		t.Errorf("Secret %s rendered; cert-manager writes it", o.secret.Name)
	}
	var secretName string
	for _, v := range o.pod.Volumes {
		if v.Secret != nil {
			secretName = v.Secret.SecretName
		}
	}
	ref := o.webhook.Annotations["cert-manager.io/inject-ca-from"]
	ns, certName, _ := strings.Cut(ref, "/")
	cert := named[*cmCertificate](objs, certName)
	switch {
	case ns != releaseNS || cert == nil:
		t.Fatalf("cert-manager.io/inject-ca-from %q names no Certificate of this release", ref)
	case cert.Spec.SecretName != secretName:
		t.Errorf("Certificate %s writes Secret %s, the injector mounts %s", cert.Name, cert.Spec.SecretName, secretName)
	case !slices.Contains(cert.Spec.DNSNames, o.svc.Name+"."+releaseNS+".svc"):
		t.Errorf("Certificate %s: dnsNames %v lack the name the API server dials", cert.Name, cert.Spec.DNSNames)
	case cert.Spec.IsCA:
		t.Errorf("serving Certificate %s is a CA", cert.Name)
	}
	if want.issuer.Name != "" {
		if cert.Spec.IssuerRef != want.issuer {
			t.Errorf("issuerRef %+v, want %+v", cert.Spec.IssuerRef, want.issuer)
		}
		if n := len(ofType[*cmIssuer](objs)); n != 0 {
			t.Errorf("%d Issuers rendered with the user's issuer", n)
		}
		return
	}
	// The chart's own chain: self-signed root -> CA Issuer -> serving cert.
	ca := named[*cmIssuer](objs, cert.Spec.IssuerRef.Name)
	if ca == nil || cert.Spec.IssuerRef.Kind != "Issuer" || ca.Spec.CA == nil {
		t.Fatalf("serving Certificate issued by %+v, not a CA Issuer of this release", cert.Spec.IssuerRef)
	}
	var root *cmCertificate
	for _, c := range ofType[*cmCertificate](objs) {
		if c.Spec.SecretName == ca.Spec.CA.SecretName {
			root = c
		}
	}
	if root == nil || !root.Spec.IsCA {
		t.Fatalf("CA Issuer %s: secret %s is no CA Certificate of this release", ca.Name, ca.Spec.CA.SecretName)
	}
	if self := named[*cmIssuer](objs, root.Spec.IssuerRef.Name); self == nil || self.Spec.SelfSigned == nil {
		t.Errorf("CA Certificate %s is not self-signed by an Issuer of this release", root.Name)
	}
	if root.Spec.Duration.Duration <= cert.Spec.Duration.Duration {
		t.Errorf("the CA (%v) must outlive the serving certificate (%v), so renewals keep the caBundle", root.Spec.Duration, cert.Spec.Duration)
	}
}

func ptr[T any](v T) *T { return &v }

// mergeValues parses each YAML document and merges them, later ones
// winning, as repeated -f flags would.
func mergeValues(t *testing.T, docs ...string) map[string]any {
	t.Helper()
	out := map[string]any{}
	for _, d := range docs {
		out = chartutil.MergeTables(parseValues(t, d), out)
	}
	return out
}

func TestInjectorRendered(t *testing.T) {
	cases := []struct {
		name, values string
		want         injectorWant
	}{
		{name: "defaults", want: defaultInjector},
		{name: "one replica, no disruption budget", values: "injector: {replicas: 1}", want: func() injectorWant { w := defaultInjector; w.replicas = 1; return w }()},
		{
			name:   "ignore, slow, excluded namespaces, other port",
			values: "injector: {failurePolicy: Ignore, timeoutSeconds: 10, excludeNamespaces: [legacy, batch], port: 9443, logLevel: debug}",
			want: func() injectorWant {
				w := defaultInjector
				w.failurePolicy, w.timeout, w.exclude, w.port = admissionregistrationv1.Ignore, 10, []string{"kube-system", "legacy", "batch"}, 9443
				return w
			}(),
		},
		{
			name:   "kube-system listed again",
			values: "injector: {excludeNamespaces: [kube-system, legacy]}",
			want:   func() injectorWant { w := defaultInjector; w.exclude = []string{"kube-system", "legacy"}; return w }(),
		},
		{name: "cert-manager", values: "injector: {certManager: {enabled: true}}", want: func() injectorWant { w := defaultInjector; w.certManager = true; return w }()},
		{
			name:   "cert-manager with the user's issuer",
			values: "injector: {certManager: {enabled: true, issuerRef: {name: corp-ca, kind: ClusterIssuer}}}",
			want: func() injectorWant {
				w := defaultInjector
				w.certManager, w.issuer = true, cmObjectReference{Name: "corp-ca", Kind: "ClusterIssuer", Group: "cert-manager.io"}
				return w
			}(),
		},
		{name: "long release name", values: "", want: defaultInjector},
		{name: "pod label only", values: "injector: {namespaceOptIn: false}", want: func() injectorWant { w := defaultInjector; w.noNamespaces = true; return w }()},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			vals := parseValues(t, tc.values)
			for _, m := range lintChart(t, vals) {
				t.Errorf("helm lint: %s", m)
			}
			release := releaseName
			if tc.name == "long release name" {
				release = "a-release-name-as-long-as-helm-allows-53-characters-x"
			}
			r, err := render(loadChart(t), vals, release)
			if err != nil {
				t.Fatal(err)
			}
			checkWorkloads(t, r.objs)
			checkInjector(t, r.objs, tc.want)
			if !strings.Contains(r.notes, `sidelock.io/inject: "true"`) {
				t.Errorf("NOTES.txt does not tell how to opt a pod in:\n%s", r.notes)
			}
			// The helm test pod goes through the injector.
			test := helmTestPod(t, r.objs)
			if !isInjectable(test.obj.(*corev1.Pod)) {
				t.Error("helm test pod does not opt in to injection")
			}
			checkSidecar(t, test, sidecarWant{addrs: sidecarAddrs(t, r.objs), readiness: true})
		})
	}
}

// sidecarAddrs are the masters of the release's StatefulSet.
func sidecarAddrs(t *testing.T, objs []object) []string {
	t.Helper()
	m, ok := checkMasters(t, objs, releaseNS)
	if !ok {
		t.Fatal("no masters")
	}
	return m.addrs
}

// Without the injector nothing of it is rendered, and the helm test pod
// carries the sidecar itself; likewise when the release namespace is one the
// injector skips.
func TestInjectorOff(t *testing.T) {
	for _, values := range []string{"injector: {enabled: false}", "injector: {excludeNamespaces: [" + releaseNS + "]}"} {
		r, err := render(loadChart(t), parseValues(t, values), releaseName)
		if err != nil {
			t.Fatal(err)
		}
		_, on := findInjector(t, r.objs)
		if on != strings.Contains(values, "exclude") {
			t.Errorf("%s: injector rendered: %v", values, on)
		}
		test := helmTestPod(t, r.objs)
		if isInjectable(test.obj.(*corev1.Pod)) {
			t.Errorf("%s: the helm test pod opts in to injection it will not get", values)
		}
		checkSidecar(t, test, sidecarWant{addrs: sidecarAddrs(t, r.objs), readiness: true})
		if strings.Contains(r.notes, "sidelock.io/inject") != on {
			t.Errorf("%s: NOTES.txt mentions the label: %v", values, !on)
		}
	}
}

// One source of truth: for every set of chart values, the sidecar the
// injector adds (from the ConfigMap the chart renders) is the container the
// sidelock.sidecar named template renders, field for field, and the
// volumes it adds are those of sidelock.volumes.
func TestInjectedSidecarIsTheNamedTemplate(t *testing.T) {
	for _, tc := range chartCases {
		t.Run(tc.name, func(t *testing.T) {
			compareInjected(t, tc.values, nil, tc.values)
		})
	}
}

// Each annotation has the effect of the chart value it overrides: a pod
// annotated X gets the container the named template renders with the
// value X.
func TestInjectorAnnotationsAreChartValues(t *testing.T) {
	all := map[string]string{
		"sidelock.io/default-ttl": "10s", "sidelock.io/max-ttl": "30m", "sidelock.io/key-prefix": "orders:", "sidelock.io/log-level": "debug",
		"sidelock.io/listen-port": "7500", "sidelock.io/admin-port": "7501", "sidelock.io/readiness-probe": "false",
		"sidelock.io/cpu-request": "20m", "sidelock.io/memory-request": "32Mi", "sidelock.io/cpu-limit": "1", "sidelock.io/memory-limit": "128Mi",
	}
	allValues := `sidecar:
  config: {defaultTTL: 10s, maxTTL: 30m, keyPrefix: "orders:", logLevel: debug}
  listenPort: 7500
  adminPort: 7501
  readinessProbe: {enabled: false}
  resources: {requests: {cpu: 20m, memory: 32Mi}, limits: {cpu: 1, memory: 128Mi}}`
	cases := []struct {
		name, base  string
		annotations map[string]string
		values      string
	}{
		{"default-ttl", "", map[string]string{"sidelock.io/default-ttl": "10s"}, "sidecar: {config: {defaultTTL: 10s}}"},
		{"max-ttl", "", map[string]string{"sidelock.io/max-ttl": "30m"}, "sidecar: {config: {maxTTL: 30m}}"},
		{"key-prefix", "", map[string]string{"sidelock.io/key-prefix": "orders:"}, `sidecar: {config: {keyPrefix: "orders:"}}`},
		{"log-level", "", map[string]string{"sidelock.io/log-level": "warn"}, "sidecar: {config: {logLevel: warn}}"},
		{"listen-port", "", map[string]string{"sidelock.io/listen-port": "7500"}, "sidecar: {listenPort: 7500}"},
		{"admin-port", "", map[string]string{"sidelock.io/admin-port": "7501"}, "sidecar: {adminPort: 7501}"},
		{"readiness off", "", map[string]string{"sidelock.io/readiness-probe": "false"}, "sidecar: {readinessProbe: {enabled: false}}"},
		{"readiness on where the chart has it off", "sidecar: {readinessProbe: {enabled: false}}", map[string]string{"sidelock.io/readiness-probe": "true"}, "sidecar: {readinessProbe: {enabled: true}}"},
		{"requests", "", map[string]string{"sidelock.io/cpu-request": "20m", "sidelock.io/memory-request": "32Mi"}, "sidecar: {resources: {requests: {cpu: 20m, memory: 32Mi}}}"},
		{"limits", "", map[string]string{"sidelock.io/cpu-limit": "500m", "sidelock.io/memory-limit": "128Mi"}, "sidecar: {resources: {limits: {cpu: 500m, memory: 128Mi}}}"},
		{"all at once", "", all, allValues},
		{"all at once, on other chart values", "redis: {masters: 5, auth: {enabled: true, password: pw}}\nsidecar: {config: {fencing: false}}", all, allValues},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			compareInjected(t, tc.base, tc.annotations, tc.base, tc.values)
		})
	}
}

// compareInjected renders the chart with base values and injects a pod
// with annotations; renders it again with values and the injector off, so
// that the helm test pod includes the named template; and compares.
func compareInjected(t *testing.T, base string, annotations map[string]string, values ...string) {
	t.Helper()
	r, err := render(loadChart(t), parseValues(t, base), releaseName)
	if err != nil {
		t.Fatal(err)
	}
	injected, pod := injectedSidecar(t, r.objs, annotations)

	off, err := render(loadChart(t), mergeValues(t, append(values, "injector: {enabled: false}")...), releaseName)
	if err != nil {
		t.Fatal(err)
	}
	test := helmTestPod(t, off.objs)
	included := sidecarOf(t, test)
	if !equality.Semantic.DeepEqual(injected, included) {
		a, _ := json.MarshalIndent(injected, "", "  ")
		b, _ := json.MarshalIndent(included, "", "  ")
		t.Errorf("injected sidecar differs from the named template's:\ninjected: %s\ntemplate: %s", a, b)
	}
	if !equality.Semantic.DeepEqual(pod.Spec.Volumes, test.spec.Volumes) {
		t.Errorf("injected volumes %+v, sidelock.volumes %+v", pod.Spec.Volumes, test.spec.Volumes)
	}
}

// The spec in internal/injector/testdata, which its unit tests use, is what the
// chart renders with default values (UPDATE_GOLDEN=1 rewrites it).
func TestInjectorTestdataIsTheChartsSpec(t *testing.T) {
	r, err := render(loadChart(t), nil, releaseName)
	if err != nil {
		t.Fatal(err)
	}
	_, spec := injectorSpecOf(t, r.objs)
	const golden = "../../internal/injector/testdata/sidecar.json"
	if os.Getenv("UPDATE_GOLDEN") != "" {
		if err := os.WriteFile(golden, spec, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	have, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if string(have) != string(spec) {
		t.Errorf("%s is stale; regenerate it with UPDATE_GOLDEN=1 go test -run %s", golden, t.Name())
	}
}

// The injector accepts a resource annotation only if Kubernetes reads it
// as a positive quantity, and accepts every reasonable one.
func TestInjectorQuantitiesAreKubernetesQuantities(t *testing.T) {
	r, err := render(loadChart(t), nil, releaseName)
	if err != nil {
		t.Fatal(err)
	}
	spec, _ := injectorSpecOf(t, r.objs)
	for _, s := range []string{
		"1", "100m", "0.5", ".5", "1.", "64Mi", "1Gi", "1k", "2M", "1e3", "1E3", "1e-3", "+2", "500u", "7n", "1Ei", "12345678901234567890",
		"0", "-1", "0m", "", "m", "Mi", "1 Mi", "1mi", "1KB", "1K", "0x10", "1e", "1.2.3", "--1", "1Mi ", " 1", "lots", "1e3Mi", "١",
	} {
		resp, _ := admit(t, spec, podFor(map[string]string{"sidelock.io/cpu-request": s}), releaseNS, false)
		q, err := resource.ParseQuantity(s)
		positive := err == nil && q.Sign() > 0
		if resp.Allowed != positive {
			t.Errorf("cpu-request %q: injector allows %v, Kubernetes reads a positive quantity: %v (%v)", s, resp.Allowed, positive, err)
		}
	}
}

// fakeCluster answers Helm's lookup from a fake API holding some Secrets
// and Namespaces, the only kinds the chart looks up.
type fakeCluster struct{ dyn dynamic.Interface }

func (f fakeCluster) GetClientFor(apiVersion, kind string) (dynamic.NamespaceableResourceInterface, bool, error) {
	switch {
	case apiVersion == "v1" && kind == "Secret":
		return f.dyn.Resource(schema.GroupVersionResource{Version: "v1", Resource: "secrets"}), true, nil
	case apiVersion == "v1" && kind == "Namespace":
		return f.dyn.Resource(schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}), false, nil
	}
	return nil, false, fmt.Errorf("unexpected lookup of %s %s", apiVersion, kind)
}

// renderUpgrade renders as `helm upgrade` does against a cluster holding
// the given objects (lookup sees them). Not in strict mode: the Helm SDK
// offers no strict rendering with a client.
func renderUpgrade(t *testing.T, vals map[string]any, existing ...runtime.Object) []object {
	t.Helper()
	ch := loadChart(t)
	if err := chartutil.ProcessDependenciesWithMerge(ch, vals); err != nil {
		t.Fatal(err)
	}
	caps := chartutil.DefaultCapabilities.Copy()
	kv, _ := chartutil.ParseKubeVersion(minKubeVersion)
	caps.KubeVersion = *kv
	top, err := chartutil.ToRenderValues(ch, vals, chartutil.ReleaseOptions{Name: releaseName, Namespace: releaseNS, Revision: 2, IsUpgrade: true}, caps)
	if err != nil {
		t.Fatal(err)
	}
	files, err := engine.RenderWithClientProvider(ch, top, fakeCluster{dynamicfake.NewSimpleDynamicClient(scheme.Scheme, existing...)})
	if err != nil {
		t.Fatal(err)
	}
	var objs []object
	for _, name := range slices.Sorted(maps.Keys(files)) {
		if strings.HasSuffix(name, ".yaml") {
			o, err := decodeStream(name, []byte(files[name]))
			if err != nil {
				t.Fatal(err)
			}
			objs = append(objs, o...)
		}
	}
	return objs
}

// Upgrades keep the serving certificate (lookup), so the caBundle keeps
// matching what running injectors serve and nothing restarts; rotate=true
// makes a new one and trusts both CAs through the rollout.
func TestInjectorCertificateOnUpgrade(t *testing.T) {
	r, err := render(loadChart(t), nil, releaseName)
	if err != nil {
		t.Fatal(err)
	}
	first := checkInjector(t, r.objs, defaultInjector)
	stored := first.secret.DeepCopy()
	stored.Namespace = releaseNS

	up := checkInjector(t, renderUpgrade(t, nil, stored), defaultInjector)
	if !equality.Semantic.DeepEqual(up.secret.Data, first.secret.Data) {
		t.Error("upgrade generated a new certificate instead of keeping the installed one")
	}
	again := checkInjector(t, renderUpgrade(t, nil, stored), defaultInjector)
	if a, b := up.deploy.Spec.Template.Annotations["checksum/tls"], again.deploy.Spec.Template.Annotations["checksum/tls"]; a != b {
		t.Error("checksum/tls changes between upgrades that keep the certificate: every upgrade would restart the injector")
	}

	rot := renderUpgrade(t, parseValues(t, "injector: {tls: {rotate: true}}"), stored)
	o, _ := findInjector(t, rot)
	if string(o.secret.Data["tls.crt"]) == string(first.secret.Data["tls.crt"]) || string(o.secret.Data["ca.crt"]) == string(first.secret.Data["ca.crt"]) {
		t.Fatal("rotate=true kept the certificate")
	}
	bundle := o.webhook.Webhooks[0].ClientConfig.CABundle
	if n := countPEM(bundle); n != 2 {
		t.Errorf("caBundle during rotation holds %d certificates, want the new CA and the old", n)
	}
	dns := o.svc.Name + "." + releaseNS + ".svc"
	verifyServing(t, bundle, o.secret.Data["tls.crt"], o.secret.Data["tls.key"], dns)         // new pods
	verifyServing(t, bundle, first.secret.Data["tls.crt"], first.secret.Data["tls.key"], dns) // pods not yet rolled
	if o.deploy.Spec.Template.Annotations["checksum/tls"] == up.deploy.Spec.Template.Annotations["checksum/tls"] {
		t.Error("a new certificate does not restart the injector")
	}
}

func countPEM(b []byte) int {
	n := 0
	for {
		var block *pem.Block
		block, b = pem.Decode(b)
		if block == nil {
			return n
		}
		n++
	}
}

// Bad injector values are refused by the schema.
func TestInjectorRejectsBadValues(t *testing.T) {
	for _, tc := range []struct{ values, want string }{
		{"injector: {failurePolicy: Maybe}", "/injector/failurePolicy"},
		{"injector: {timeoutSeconds: 31}", "/injector/timeoutSeconds"},
		{"injector: {timeoutSeconds: 0}", "/injector/timeoutSeconds"},
		{"injector: {replicas: 0}", "/injector/replicas"},
		{"injector: {excludeNamespaces: [Bad_NS]}", "/injector/excludeNamespaces/0"},
		{"injector: {excludeNamespaces: [a, a]}", "/injector/excludeNamespaces"},
		{"injector: {certManager: {issuerRef: {kind: Vault}}}", "/injector/certManager/issuerRef/kind"},
		{"injector: {tls: {validityDays: 0}}", "/injector/tls/validityDays"},
		{"injector: {enable: true}", "enable"},
		{"injector: {logLevel: trace}", "/injector/logLevel"},
		{`injector: {enabled: "true"}`, "/injector/enabled"},
	} {
		_, err := render(loadChart(t), parseValues(t, tc.values), releaseName)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want a schema error about %s", tc.values, err, tc.want)
		}
	}
}
