package injector_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/sidelock/sidelock/internal/injector"
)

// testdata/sidecar.json is the chart's rendering of the spec with default
// values (release shop in namespace payments); test/deploy keeps it equal
// to the chart.
func loadSpec(t testing.TB) *injector.Spec {
	t.Helper()
	s, err := injector.LoadSpec("testdata/sidecar.json")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// specWith returns the test spec with its JSON changed by edit.
func specWith(t testing.TB, edit func(m map[string]any)) *injector.Spec {
	t.Helper()
	data, err := os.ReadFile("testdata/sidecar.json")
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	edit(m)
	data, _ = json.Marshal(m)
	s, err := injector.ParseSpec(data)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func newInjector(t testing.TB, s *injector.Spec, exclude ...string) *injector.Injector {
	t.Helper()
	i, err := injector.New(injector.Config{Spec: s, ExcludeNamespaces: exclude})
	if err != nil {
		t.Fatal(err)
	}
	return i
}

// podJSON is a pod as the API server sends it at creation: no name yet
// when a controller creates it.
func podJSON(labels, annotations map[string]string, extra string) string {
	meta := map[string]any{"generateName": "web-"}
	if labels != nil {
		meta["labels"] = labels
	}
	if annotations != nil {
		meta["annotations"] = annotations
	}
	m, _ := json.Marshal(meta)
	spec := `{"containers":[{"name":"web","image":"web:1","ports":[{"containerPort":8080}]}]` + extra + `}`
	return `{"apiVersion":"v1","kind":"Pod","metadata":` + string(m) + `,"spec":` + spec + `}`
}

var optIn = map[string]string{"sidelock.io/inject": "true", "app": "web"}

func request(uid, ns, op, object string) *injector.AdmissionRequest {
	return &injector.AdmissionRequest{
		UID:       uid,
		Kind:      injector.GroupVersionKind{Version: "v1", Kind: "Pod"},
		Resource:  injector.GroupVersionResource{Version: "v1", Resource: "pods"},
		Namespace: ns,
		Operation: op,
		Object:    json.RawMessage(object),
	}
}

func reviewBody(t testing.TB, req *injector.AdmissionRequest) []byte {
	t.Helper()
	b, err := json.Marshal(injector.AdmissionReview{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview", Request: req})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// post sends a review through the HTTP handler and decodes the answer.
func post(t testing.TB, h http.Handler, body []byte) *injector.AdmissionResponse {
	t.Helper()
	rec := httptest.NewRecorder()
	r := httptest.NewRequest(http.MethodPost, "/mutate", bytes.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	h.ServeHTTP(rec, r)
	if rec.Code != http.StatusOK {
		t.Fatalf("HTTP %d: %s", rec.Code, rec.Body)
	}
	var out injector.AdmissionReview
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
		t.Fatalf("answer: %v\n%s", err, rec.Body)
	}
	if out.APIVersion != "admission.k8s.io/v1" || out.Kind != "AdmissionReview" || out.Response == nil || out.Request != nil {
		t.Fatalf("answer is not an AdmissionReview v1 response: %s", rec.Body)
	}
	return out.Response
}

// mutated applies the response's patch to the pod and decodes the result.
func mutated(t testing.TB, podDoc string, resp *injector.AdmissionResponse) (result map[string]any) {
	t.Helper()
	if !resp.Allowed {
		t.Fatalf("denied: %+v", resp.Result)
	}
	if resp.Patch == nil {
		t.Fatal("no patch")
	}
	if resp.PatchType == nil || *resp.PatchType != "JSONPatch" {
		t.Fatalf("patchType %v", resp.PatchType)
	}
	out, err := applyPatch([]byte(podDoc), resp.Patch)
	if err != nil {
		t.Fatalf("patch does not apply: %v\n%s", err, resp.Patch)
	}
	if err := json.Unmarshal(out, &result); err != nil {
		t.Fatal(err)
	}
	return result
}

func specContainer(t testing.TB) map[string]any {
	t.Helper()
	data, err := os.ReadFile("testdata/sidecar.json")
	if err != nil {
		t.Fatal(err)
	}
	var s struct{ Container map[string]any }
	if err := json.Unmarshal(data, &s); err != nil {
		t.Fatal(err)
	}
	return s.Container
}

func initContainers(p map[string]any) []map[string]any {
	spec, _ := p["spec"].(map[string]any)
	l, _ := spec["initContainers"].([]any)
	var out []map[string]any
	for _, c := range l {
		out = append(out, c.(map[string]any))
	}
	return out
}

func annotationsOf(p map[string]any) map[string]any {
	a, _ := p["metadata"].(map[string]any)["annotations"].(map[string]any)
	return a
}

func envOf(c map[string]any, name string) (string, bool) {
	for _, e := range c["env"].([]any) {
		if m := e.(map[string]any); m["name"] == name {
			v, ok := m["value"].(string)
			return v, ok
		}
	}
	return "", false
}

func TestInjectsOptedInPod(t *testing.T) {
	inj := newInjector(t, loadSpec(t))
	for _, tc := range []struct {
		name, extra string
		annotations map[string]string
		wantInits   []string
	}{
		{name: "no init containers, no annotations", wantInits: []string{"sidelock"}},
		{name: "empty init containers", extra: `,"initContainers":[]`, annotations: map[string]string{}, wantInits: []string{"sidelock"}},
		{
			name:        "existing init containers and annotations",
			extra:       `,"initContainers":[{"name":"migrate","image":"m:1"},{"name":"warm","image":"w:1"}]`,
			annotations: map[string]string{"team": "payments", "a/b~c": "x"},
			wantInits:   []string{"sidelock", "migrate", "warm"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			doc := podJSON(optIn, tc.annotations, tc.extra)
			resp := post(t, inj, reviewBody(t, request("uid-1", "shop", "CREATE", doc)))
			if resp.UID != "uid-1" {
				t.Errorf("uid %q, want the request's", resp.UID)
			}
			p := mutated(t, doc, resp)
			inits := initContainers(p)
			var names []string
			for _, c := range inits {
				names = append(names, c["name"].(string))
			}
			if !slices.Equal(names, tc.wantInits) {
				t.Fatalf("init containers %v, want %v (the sidecar first)", names, tc.wantInits)
			}
			// Exactly the chart's container: nothing added, nothing lost.
			if got, want := inits[0], specContainer(t); !reflect.DeepEqual(got, want) {
				t.Errorf("injected container differs from the spec:\n got %v\nwant %v", got, want)
			}
			if inits[0]["restartPolicy"] != "Always" {
				t.Error("not a native sidecar")
			}
			ann := annotationsOf(p)
			if ann["sidelock.io/status"] != "injected" {
				t.Errorf("status annotation %v", ann["sidelock.io/status"])
			}
			for k, v := range tc.annotations {
				if ann[k] != v {
					t.Errorf("annotation %s lost", k)
				}
			}
			if c := p["spec"].(map[string]any)["containers"].([]any); len(c) != 1 || c[0].(map[string]any)["name"] != "web" {
				t.Errorf("app containers changed: %v", c)
			}
			if _, ok := p["spec"].(map[string]any)["volumes"]; ok {
				t.Error("volumes added though the spec has none")
			}

			// Idempotent: the injected pod, reviewed again (reinvocation),
			// is left as it is.
			again, _ := json.Marshal(p)
			resp = post(t, inj, reviewBody(t, request("uid-2", "shop", "CREATE", string(again))))
			if !resp.Allowed || resp.Patch != nil || resp.UID != "uid-2" {
				t.Errorf("second review: %+v, want allowed without patch", resp)
			}
		})
	}
}

func TestLeavesOtherPodsAlone(t *testing.T) {
	inj := newInjector(t, loadSpec(t), "legacy", " ", "")
	injected := map[string]string{"sidelock.io/status": "injected"}
	own := map[string]string{"sidelock.io/inject": "true", "sidelock.io/component": "injector"}
	for _, tc := range []struct {
		name string
		req  *injector.AdmissionRequest
	}{
		{"opted out", request("u", "shop", "CREATE", podJSON(map[string]string{"sidelock.io/inject": "false", "app": "web"}, nil, ""))},
		{"kube-system", request("u", "kube-system", "CREATE", podJSON(optIn, nil, ""))},
		{"kube-system from the pod", request("u", "", "CREATE", strings.Replace(podJSON(optIn, nil, ""), `"generateName"`, `"namespace":"kube-system","generateName"`, 1))},
		{"excluded namespace", request("u", "legacy", "CREATE", podJSON(optIn, nil, ""))},
		{"the injector's own pod", request("u", "shop", "CREATE", podJSON(own, nil, ""))},
		{"already injected", request("u", "shop", "CREATE", podJSON(optIn, injected, ""))},
		{"update", request("u", "shop", "UPDATE", podJSON(optIn, nil, ""))},
		{"delete (no object)", request("u", "shop", "DELETE", "")},
		{"not a pod", func() *injector.AdmissionRequest {
			r := request("u", "shop", "CREATE", `{"kind":"Deployment"}`)
			r.Kind = injector.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}
			r.Resource = injector.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
			return r
		}()},
		{"subresource", func() *injector.AdmissionRequest {
			r := request("u", "shop", "CREATE", `{}`)
			r.SubResource = "binding"
			return r
		}()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := post(t, inj, reviewBody(t, tc.req))
			if !resp.Allowed || resp.Patch != nil || resp.PatchType != nil || resp.Result != nil || resp.UID != "u" {
				t.Errorf("got %+v, want allowed, unchanged, uid echoed", resp)
			}
		})
	}
}

// A pod of a namespace labelled sidelock-injection: enabled comes without
// the pod label (the webhook's namespace entry sends every pod there but
// those labelled "false"): it is injected, and leaves labelled
// sidelock.io/inject: "true" like every injected pod, so that one label
// selects them all (NetworkPolicy, PodMonitor). Its other labels stay.
func TestNamespaceOptInPodIsInjectedAndLabelled(t *testing.T) {
	inj := newInjector(t, loadSpec(t))
	for _, tc := range []struct {
		name   string
		labels map[string]string
	}{
		{"no labels at all", nil},
		{"other labels", map[string]string{"app": "web", "a/b~c": "x"}},
		{"label neither true nor false", map[string]string{"sidelock.io/inject": "yes", "app": "web"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			doc := podJSON(tc.labels, nil, "")
			p := mutated(t, doc, post(t, inj, reviewBody(t, request("u", "shop", "CREATE", doc))))
			if inits := initContainers(p); len(inits) != 1 || inits[0]["name"] != "sidelock" {
				t.Fatalf("init containers %v, want the sidecar", inits)
			}
			got, _ := p["metadata"].(map[string]any)["labels"].(map[string]any)
			want := map[string]any{"sidelock.io/inject": "true"}
			for k, v := range tc.labels {
				if k != "sidelock.io/inject" {
					want[k] = v
				}
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("labels %v, want %v", got, want)
			}
		})
	}
	// A pod that opted in by label keeps its labels as they are.
	doc := podJSON(optIn, nil, "")
	resp := post(t, inj, reviewBody(t, request("u", "shop", "CREATE", doc)))
	if strings.Contains(string(resp.Patch), "/metadata/labels") {
		t.Errorf("patch touches the labels of a pod labelled %v: %s", optIn, resp.Patch)
	}
}

// A pod that already has a container of the sidecar's name (it included
// the named template by hand and opted in too) is admitted unchanged, with
// a warning.
func TestContainerNameTaken(t *testing.T) {
	inj := newInjector(t, loadSpec(t))
	doc := podJSON(optIn, nil, `,"initContainers":[{"name":"sidelock","image":"x"}]`)
	resp := post(t, inj, reviewBody(t, request("u", "shop", "CREATE", doc)))
	if !resp.Allowed || resp.Patch != nil || len(resp.Warnings) != 1 || !strings.Contains(resp.Warnings[0], `"sidelock"`) {
		t.Errorf("got %+v", resp)
	}
}

// Dry-run requests (kubectl apply --dry-run=server) get the same answer:
// the injector has no side effects (sideEffects: None).
func TestDryRun(t *testing.T) {
	inj := newInjector(t, loadSpec(t))
	doc := podJSON(optIn, map[string]string{"sidelock.io/log-level": "debug"}, "")
	wet := post(t, inj, reviewBody(t, request("u", "shop", "CREATE", doc)))
	req := request("u", "shop", "CREATE", doc)
	yes := true
	req.DryRun = &yes
	dry := post(t, inj, reviewBody(t, req))
	if !dry.Allowed || !bytes.Equal(dry.Patch, wet.Patch) {
		t.Errorf("dry run answered %+v, want the same patch as %s", dry, wet.Patch)
	}
}

func TestAnnotationsApplied(t *testing.T) {
	inj := newInjector(t, loadSpec(t))
	doc := podJSON(optIn, map[string]string{
		"sidelock.io/default-ttl":     "10s",
		"sidelock.io/max-ttl":         "30m",
		"sidelock.io/key-prefix":      "orders:",
		"sidelock.io/log-level":       "debug",
		"sidelock.io/listen-port":     "7500",
		"sidelock.io/admin-port":      "7501",
		"sidelock.io/readiness-probe": "false",
		"sidelock.io/cpu-request":     "25m",
		"sidelock.io/memory-request":  "24Mi",
		"sidelock.io/cpu-limit":       "1",
		"sidelock.io/memory-limit":    "96Mi",
		"other.io/keep":               "yes",
	}, "")
	resp := post(t, inj, reviewBody(t, request("u", "shop", "CREATE", doc)))
	c := initContainers(mutated(t, doc, resp))[0]
	for name, want := range map[string]string{
		"SIDELOCK_DEFAULT_TTL": "10s", "SIDELOCK_MAX_TTL": "30m", "SIDELOCK_KEY_PREFIX": "orders:", "SIDELOCK_LOG_LEVEL": "debug",
		"SIDELOCK_LISTEN_ADDR": "127.0.0.1:7500", "SIDELOCK_ADMIN_ADDR": ":7501",
		"SIDELOCK_KEY_TTL": "10s", // untouched
	} {
		if got, _ := envOf(c, name); got != want {
			t.Errorf("%s=%q, want %q", name, got, want)
		}
	}
	ports := c["ports"].([]any)
	if len(ports) != 1 || ports[0].(map[string]any)["containerPort"] != float64(7501) || ports[0].(map[string]any)["name"] != "sidelock-admin" {
		t.Errorf("ports %v, want sidelock-admin 7501", ports)
	}
	if _, ok := c["readinessProbe"]; ok {
		t.Error("readiness probe kept")
	}
	for _, p := range []string{"startupProbe", "livenessProbe"} {
		if port := c[p].(map[string]any)["httpGet"].(map[string]any)["port"]; port != "sidelock-admin" {
			t.Errorf("%s on port %v, want sidelock-admin", p, port)
		}
	}
	want := map[string]any{"requests": map[string]any{"cpu": "25m", "memory": "24Mi"}, "limits": map[string]any{"cpu": "1", "memory": "96Mi"}}
	if !reflect.DeepEqual(c["resources"], want) {
		t.Errorf("resources %v, want %v", c["resources"], want)
	}
}

// The readiness probe follows sidecar.readinessProbe.enabled (the spec's
// readinessByDefault) unless the pod says otherwise.
func TestReadinessDefault(t *testing.T) {
	off := specWith(t, func(m map[string]any) { m["readinessByDefault"] = false })
	for _, tc := range []struct {
		spec       *injector.Spec
		annotation string
		want       bool
	}{
		{loadSpec(t), "", true},
		{loadSpec(t), "false", false},
		{loadSpec(t), "true", true},
		{off, "", false},
		{off, "true", true},
		{off, "false", false},
	} {
		var ann map[string]string
		if tc.annotation != "" {
			ann = map[string]string{"sidelock.io/readiness-probe": tc.annotation}
		}
		doc := podJSON(optIn, ann, "")
		c := initContainers(mutated(t, doc, post(t, newInjector(t, tc.spec), reviewBody(t, request("u", "shop", "CREATE", doc)))))[0]
		if _, got := c["readinessProbe"]; got != tc.want {
			t.Errorf("readinessByDefault %v, annotation %q: probe %v, want %v", tc.spec.ReadinessByDefault, tc.annotation, got, tc.want)
		}
	}
}

func TestBadAnnotationsDenied(t *testing.T) {
	inj := newInjector(t, loadSpec(t))
	for _, tc := range []struct {
		name        string
		annotations map[string]string
		extra       string
		want        []string // in the message
	}{
		{"ttl without unit", map[string]string{"sidelock.io/default-ttl": "30"}, "", []string{"sidelock.io/default-ttl", `"30" is not a duration`}},
		{"ttl below 1s", map[string]string{"sidelock.io/max-ttl": "500ms"}, "", []string{"sidelock.io/max-ttl"}},
		{"negative ttl", map[string]string{"sidelock.io/default-ttl": "-5s"}, "", []string{"sidelock.io/default-ttl"}},
		{"log level", map[string]string{"sidelock.io/log-level": "verbose"}, "", []string{"sidelock.io/log-level", "debug, info, warn or error"}},
		{"port not a number", map[string]string{"sidelock.io/listen-port": "http"}, "", []string{"sidelock.io/listen-port"}},
		{"port out of range", map[string]string{"sidelock.io/admin-port": "70000"}, "", []string{"sidelock.io/admin-port"}},
		{"port with sign", map[string]string{"sidelock.io/admin-port": "+7421"}, "", []string{"sidelock.io/admin-port"}},
		{"readiness not a bool", map[string]string{"sidelock.io/readiness-probe": "no"}, "", []string{"sidelock.io/readiness-probe", "true or false"}},
		{"bad quantity", map[string]string{"sidelock.io/memory-limit": "lots"}, "", []string{"sidelock.io/memory-limit", "quantity"}},
		{"zero quantity", map[string]string{"sidelock.io/cpu-request": "0"}, "", []string{"sidelock.io/cpu-request", "positive"}},
		{"key prefix with space", map[string]string{"sidelock.io/key-prefix": "my app:"}, "", []string{"sidelock.io/key-prefix"}},
		{"key prefix reaching other prefixes' keys", map[string]string{"sidelock.io/key-prefix": "sidelock:victim#"}, "", []string{"sidelock.io/key-prefix", `"sidelock:victim#" must be 1 to 64 bytes of A-Z a-z 0-9 . _ / - ending in one ':'`}},
		{"key prefix without its colon", map[string]string{"sidelock.io/key-prefix": "orders"}, "", []string{"sidelock.io/key-prefix", "ending in one ':'"}},
		{"empty key prefix", map[string]string{"sidelock.io/key-prefix": ""}, "", []string{"sidelock.io/key-prefix"}},
		{"unknown annotation", map[string]string{"sidelock.io/defaultTTL": "30s"}, "", []string{"unknown annotation sidelock.io/defaultTTL", "sidelock.io/default-ttl"}},
		{"every problem at once", map[string]string{"sidelock.io/log-level": "loud", "sidelock.io/max-ttl": "forever"}, "", []string{"sidelock.io/log-level", "sidelock.io/max-ttl"}},
		{"default above max", map[string]string{"sidelock.io/default-ttl": "2h"}, "", []string{"SIDELOCK_DEFAULT_TTL 2h0m0s must not exceed SIDELOCK_MAX_TTL 1h0m0s", "sidelock.io/default-ttl", "sidelock.io/max-ttl"}},
		{"max below key ttl", map[string]string{"sidelock.io/max-ttl": "5s", "sidelock.io/default-ttl": "5s"}, "", []string{"SIDELOCK_KEY_TTL 10s must not exceed SIDELOCK_MAX_TTL 5s", "sidecar.config.keyTTL"}},
		{"max above fence retention", map[string]string{"sidelock.io/max-ttl": "2h"}, "", []string{"SIDELOCK_FENCE_RETENTION 1h0m0s must be at least SIDELOCK_MAX_TTL 2h0m0s", "sidecar.config.fenceRetention"}},
		{"request above limit", map[string]string{"sidelock.io/memory-request": "128Mi"}, "", []string{"memory request 128Mi exceeds its limit 96Mi"}},
		{"request above limit, other units", map[string]string{"sidelock.io/cpu-request": "1.5", "sidelock.io/cpu-limit": "1000m"}, "", []string{"cpu request 1.5 exceeds its limit 1000m"}},
		{"same ports", map[string]string{"sidelock.io/listen-port": "7421"}, "", []string{"must differ"}},
		{"port used by the app", map[string]string{"sidelock.io/admin-port": "8080"}, "", []string{"container web uses port 8080", "sidelock.io/admin-port"}},
		{"default port used by the app", nil, `,"initContainers":[{"name":"proxy","ports":[{"containerPort":7420}]}]`, []string{"container proxy uses port 7420", "sidelock.io/listen-port"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			doc := podJSON(optIn, tc.annotations, tc.extra)
			resp := post(t, inj, reviewBody(t, request("uid-x", "shop", "CREATE", doc)))
			if resp.Allowed || resp.Patch != nil {
				t.Fatalf("allowed: %+v", resp)
			}
			if resp.UID != "uid-x" || resp.Result == nil || resp.Result.Code != 422 || resp.Result.Reason != "Invalid" {
				t.Fatalf("response %+v, result %+v", resp, resp.Result)
			}
			msg := resp.Result.Message
			if !strings.HasPrefix(msg, "sidelock injector: pod web-<generated>: ") || strings.Contains(msg, "\n") {
				t.Errorf("message %q", msg)
			}
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("message %q does not mention %q", msg, w)
				}
			}
		})
	}
}

// UDP ports do not collide with the sidecar's TCP listeners.
func TestUDPPortNoConflict(t *testing.T) {
	inj := newInjector(t, loadSpec(t))
	doc := podJSON(optIn, nil, `,"initContainers":[{"name":"dns","ports":[{"containerPort":7420,"protocol":"UDP"}]}]`)
	mutated(t, doc, post(t, inj, reviewBody(t, request("u", "shop", "CREATE", doc))))
}

func TestVolumesAdded(t *testing.T) {
	spec := specWith(t, func(m map[string]any) {
		m["volumes"] = []any{map[string]any{"name": "redis-ca", "secret": map[string]any{"secretName": "corp-ca"}}}
	})
	inj := newInjector(t, spec)
	for _, extra := range []string{"", `,"volumes":[{"name":"data","emptyDir":{}}]`} {
		doc := podJSON(optIn, nil, extra)
		p := mutated(t, doc, post(t, inj, reviewBody(t, request("u", "shop", "CREATE", doc))))
		var names []string
		for _, v := range p["spec"].(map[string]any)["volumes"].([]any) {
			names = append(names, v.(map[string]any)["name"].(string))
		}
		if want := strings.Fields(map[bool]string{true: "redis-ca", false: "data redis-ca"}[extra == ""]); !slices.Equal(names, want) {
			t.Errorf("volumes %v, want %v", names, want)
		}
	}
	doc := podJSON(optIn, nil, `,"volumes":[{"name":"redis-ca","emptyDir":{}}]`)
	resp := post(t, inj, reviewBody(t, request("u", "shop", "CREATE", doc)))
	if resp.Allowed || !strings.Contains(resp.Result.Message, `volume named "redis-ca"`) {
		t.Errorf("volume name clash: %+v %+v", resp, resp.Result)
	}
}

// The Redis password Secret lives in the release's namespace: pods
// elsewhere are admitted (the user may have copied it) with a warning.
func TestSecretInOtherNamespaceWarns(t *testing.T) {
	spec := specWith(t, func(m map[string]any) {
		c := m["container"].(map[string]any)
		c["env"] = append(c["env"].([]any), map[string]any{
			"name": "SIDELOCK_REDIS_PASSWORD", "valueFrom": map[string]any{"secretKeyRef": map[string]any{"name": "shop-sidelock-redis-auth", "key": "password"}},
		})
	})
	inj := newInjector(t, spec)
	doc := podJSON(optIn, nil, "")
	if resp := post(t, inj, reviewBody(t, request("u", "payments", "CREATE", doc))); len(resp.Warnings) != 0 {
		t.Errorf("warnings in the release namespace: %v", resp.Warnings)
	}
	resp := post(t, inj, reviewBody(t, request("u", "shop", "CREATE", doc)))
	mutated(t, doc, resp)
	// It names the fix: the chart value that copies the Secret (test/deploy
	// checks that the value exists).
	if len(resp.Warnings) != 1 || !strings.Contains(resp.Warnings[0], "shop-sidelock-redis-auth") || !strings.Contains(resp.Warnings[0], "payments") ||
		!strings.Contains(resp.Warnings[0], "add shop to the chart's redis.auth.copyTo.namespaces") {
		t.Errorf("warnings %v", resp.Warnings)
	}
}

// Requests that are not AdmissionReviews get a 4xx and a reason, never a
// panic; a review whose object is not a pod is denied with its uid.
func TestMalformedRequests(t *testing.T) {
	inj := newInjector(t, loadSpec(t))
	valid := string(reviewBody(t, request("u", "shop", "CREATE", podJSON(optIn, nil, ""))))
	for _, tc := range []struct {
		name, method, contentType, body string
		want                            int
	}{
		{"GET", http.MethodGet, "application/json", "", 405},
		{"not JSON content", http.MethodPost, "text/plain", valid, 415},
		{"empty", http.MethodPost, "application/json", "", 400},
		{"garbage", http.MethodPost, "application/json", "{not json", 400},
		{"array", http.MethodPost, "application/json", "[]", 400},
		{"v1beta1", http.MethodPost, "application/json", strings.Replace(valid, "admission.k8s.io/v1", "admission.k8s.io/v1beta1", 1), 400},
		{"no request", http.MethodPost, "application/json", `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`, 400},
		{"no uid", http.MethodPost, "application/json", strings.Replace(valid, `"uid":"u"`, `"uid":""`, 1), 400},
		{"wrong types", http.MethodPost, "application/json", `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":7}}`, 400},
		{"trailing data", http.MethodPost, "application/json", valid + "{}", 400},
		{"too large", http.MethodPost, "application/json", `{"x":"` + strings.Repeat("a", 5<<20) + `"}`, 413},
		{"charset is fine", http.MethodPost, "application/json; charset=utf-8", valid, 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			r := httptest.NewRequest(tc.method, "/mutate", strings.NewReader(tc.body))
			r.Header.Set("Content-Type", tc.contentType)
			inj.ServeHTTP(rec, r)
			if rec.Code != tc.want {
				t.Errorf("HTTP %d, want %d: %s", rec.Code, tc.want, rec.Body)
			}
			if tc.want >= 400 && strings.TrimSpace(rec.Body.String()) == "" {
				t.Error("no reason given")
			}
		})
	}

	for _, obj := range []string{
		`"a pod"`, `null`, `{"metadata":{"labels":{"sidelock.io/inject":1}},"spec":{}}`, `{"metadata":{},"spec":{"containers":{}}}`,
		`{"metadata":{"labels":{"sidelock.io/inject":"true"}}}`,           // no spec to add to
		`{"metAdAtA":{"lABels":{"sidelock.io/inject":"true"}},"spec":{}}`, // keys are case-sensitive (found by FuzzDecodeReview)
		`{"metadata":{"labels":{"sidelock.io/inject":"true"}},"spec":{"volumes":[1]}}`,
	} {
		resp := post(t, inj, reviewBody(t, request("uid-bad", "shop", "CREATE", obj)))
		if resp.Allowed || resp.UID != "uid-bad" || resp.Result == nil || resp.Result.Code != 400 || !strings.Contains(resp.Result.Message, "cannot decode the pod") {
			t.Errorf("object %s: %+v", obj, resp)
		}
	}
}

func TestParseSpecRejects(t *testing.T) {
	data, err := os.ReadFile("testdata/sidecar.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		edit func(m map[string]any)
		want string
	}{
		{"unknown field", func(m map[string]any) { m["extra"] = 1 }, "unknown field"},
		{"no container", func(m map[string]any) { delete(m, "container") }, "container"},
		{"no name", func(m map[string]any) { delete(m["container"].(map[string]any), "name") }, "no name"},
		{"regular container", func(m map[string]any) { delete(m["container"].(map[string]any), "restartPolicy") }, "restartPolicy"},
		{"no image", func(m map[string]any) { delete(m["container"].(map[string]any), "image") }, "no image"},
		{"no admin port", func(m map[string]any) { m["container"].(map[string]any)["ports"] = []any{} }, "sidelock-admin"},
		{"admin port mismatch", func(m map[string]any) {
			m["container"].(map[string]any)["ports"].([]any)[0].(map[string]any)["containerPort"] = 9999
		}, "does not listen on port sidelock-admin=9999"},
		{"no listen addr", func(m map[string]any) {
			c := m["container"].(map[string]any)
			c["env"] = c["env"].([]any)[1:]
		}, "SIDELOCK_LISTEN_ADDR"},
		{"no readiness probe", func(m map[string]any) { delete(m["container"].(map[string]any), "readinessProbe") }, "readinessProbe"},
		{"nameless volume", func(m map[string]any) { m["volumes"] = []any{map[string]any{"emptyDir": map[string]any{}}} }, "volume 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var m map[string]any
			if err := json.Unmarshal(data, &m); err != nil {
				t.Fatal(err)
			}
			tc.edit(m)
			b, _ := json.Marshal(m)
			if _, err := injector.ParseSpec(b); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err %v, want one about %q", err, tc.want)
			}
		})
	}
	if _, err := injector.New(injector.Config{}); err == nil {
		t.Error("New without a spec")
	}
	if _, err := injector.LoadSpec("testdata/missing.json"); err == nil {
		t.Error("LoadSpec of a missing file")
	}
}

// Every annotation is documented in docs/kubernetes.md.
func TestAnnotationsDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../docs/kubernetes.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range injector.Annotations {
		if !bytes.Contains(doc, []byte("`"+a.Key+"`")) {
			t.Errorf("docs/kubernetes.md does not document %s", a.Key)
		}
	}
	for _, k := range []string{injector.InjectLabel, injector.StatusAnnotation} {
		if !bytes.Contains(doc, []byte(k)) {
			t.Errorf("docs/kubernetes.md does not mention %s", k)
		}
	}
}

// The injector applies the sidecar's own rules between settings
// (config.CheckCombination) to the container an annotated pod would get:
// the chart's values among them, which no annotation changes, so a
// combination the sidecar would refuse at start is refused at admission.
// A variable taken from a Secret (an API token) cannot be read, and no
// rule judges it.
func TestCombinationRulesAreTheSidecars(t *testing.T) {
	// setEnv sets the container's variable name to the entry e.
	setEnv := func(name string, e map[string]any) func(m map[string]any) {
		return func(m map[string]any) {
			c := m["container"].(map[string]any)
			env := c["env"].([]any)
			e["name"] = name
			for i, old := range env {
				if old.(map[string]any)["name"] == name {
					env[i] = e
					return
				}
			}
			c["env"] = append(env, e)
		}
	}
	slowNode := specWith(t, setEnv("SIDELOCK_NODE_TIMEOUT", map[string]any{"value": "2s"}))
	doc := podJSON(optIn, map[string]string{"sidelock.io/log-level": "debug"}, "")
	resp := post(t, newInjector(t, slowNode), reviewBody(t, request("u", "shop", "CREATE", doc)))
	if resp.Allowed || resp.Result == nil || !strings.Contains(resp.Result.Message, "SIDELOCK_NODE_TIMEOUT 2s must be positive and at most a tenth of SIDELOCK_KEY_TTL 10s") ||
		!strings.Contains(resp.Result.Message, "sidecar.config.nodeTimeout") {
		t.Fatalf("a node timeout the sidecar refuses: allowed %v, %+v", resp.Allowed, resp.Result)
	}
	wide := specWith(t, func(m map[string]any) {
		setEnv("SIDELOCK_LISTEN_ADDR", map[string]any{"value": "0.0.0.0:7420"})(m)
		setEnv("SIDELOCK_API_TOKEN", map[string]any{"valueFrom": map[string]any{"secretKeyRef": map[string]any{"name": "t", "key": "t"}}})(m)
	})
	mutated(t, doc, post(t, newInjector(t, wide), reviewBody(t, request("u", "shop", "CREATE", doc))))
	open := specWith(t, setEnv("SIDELOCK_LISTEN_ADDR", map[string]any{"value": "0.0.0.0:7420"}))
	if resp := post(t, newInjector(t, open), reviewBody(t, request("u", "shop", "CREATE", doc))); resp.Allowed {
		t.Fatalf("a lock API beyond loopback without a token was admitted")
	}
}
