// Package injector is sidelock's sidecar injector: a mutating admission
// webhook (AdmissionReview v1) that adds the sidelock container to the pods
// that opt in: with the label sidelock.io/inject: "true", or by being created
// in a namespace labelled sidelock-injection: enabled without the label
// sidelock.io/inject: "false".
//
// Which pods opt in is the webhook's selectors' business (the chart's two
// webhook entries, one per way in): the API server sends the injector only
// those. A review carries no namespace labels, so the injector cannot
// re-check the namespace's opt-in; it checks what it can see and what both
// entries agree on: a pod labelled sidelock.io/inject: "false" is never
// injected. Every pod it injects leaves labelled sidelock.io/inject: "true",
// whichever way it came in, so that one label selects all pods with the
// sidecar (the masters' NetworkPolicy, the PodMonitor).
//
// The container comes from a Spec, which the Helm chart renders from the
// same `sidelock.sidecar` named template that app charts include by hand;
// the injector adds it as a native sidecar (the first init container, with
// restartPolicy Always), applies the pod's sidelock.io/* annotations (see
// Annotations) and marks the pod with sidelock.io/status: injected so that
// a second call changes nothing. It never touches pods in kube-system (or
// other excluded namespaces), nor the injector's own pods, and has no side
// effects, so dry-run requests are answered like any other.
//
// Everything a caller controls is bounded (see the limits in limits.go):
// the body, the reviews decoded at once, the sidelock.io/ annotations, and
// what denials and log lines quote.
//
// The package depends on the standard library only, on internal/config for
// the settings table and the rules between settings, and on internal/lease
// for the key prefix rule the sidecar applies: admission and pod types are
// reduced to the fields it needs (see AdmissionReview).
package injector

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/sidelock/sidelock/internal/config"
)

// Config configures an Injector.
type Config struct {
	// Spec is the sidecar to inject (see LoadSpec).
	Spec *Spec
	// ExcludeNamespaces are namespaces whose pods are never injected, on
	// top of kube-system, which always is.
	ExcludeNamespaces []string
	// Logger receives one line per decision; nil discards.
	Logger *slog.Logger
}

// Injector answers AdmissionReview requests for pods.
type Injector struct {
	spec    *Spec
	exclude []string
	log     *slog.Logger
	budget  *reviewBudget
}

// AlwaysExcluded is never injected, whatever the configuration says.
const AlwaysExcluded = "kube-system"

// New checks cfg and returns an Injector.
func New(cfg Config) (*Injector, error) {
	if cfg.Spec == nil || cfg.Spec.name == "" {
		return nil, errors.New("injector: no sidecar spec (use LoadSpec or ParseSpec)")
	}
	log := slog.New(slog.DiscardHandler)
	if cfg.Logger != nil {
		log = slog.New(boundedHandler{cfg.Logger.Handler()})
	}
	exclude := []string{AlwaysExcluded}
	for _, ns := range cfg.ExcludeNamespaces {
		if ns = strings.TrimSpace(ns); ns != "" && !slices.Contains(exclude, ns) {
			exclude = append(exclude, ns)
		}
	}
	return &Injector{spec: cfg.Spec, exclude: exclude, log: log, budget: newReviewBudget(reviewBudgetBytes)}, nil
}

// ServeHTTP answers a POSTed AdmissionReview. A body that is not a review
// the injector can answer gets a 4xx with a plain-text reason (there is no
// uid to answer with): 413 over MaxReviewBytes, 429 with Retry-After when
// the reviews in progress hold the memory budget (reviewBudgetBytes) for
// longer than reviewBudgetWait. The API server retries a 429 within the
// webhook's timeout, then applies its failurePolicy. A review it can
// answer always gets 200 and a response echoing the request's uid, which
// may deny the pod.
func (i *Injector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "POST an AdmissionReview", http.StatusMethodNotAllowed)
		return
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		http.Error(w, "Content-Type must be application/json", http.StatusUnsupportedMediaType)
		return
	}
	if r.ContentLength > MaxReviewBytes {
		i.refuseTooLarge(w, r)
		return
	}
	size := r.ContentLength
	if size < 0 { // not announced (chunked): it may be as large as allowed
		size = MaxReviewBytes
	}
	if !i.budget.acquire(r.Context(), size, reviewBudgetWait) {
		i.log.Warn("busy with other large reviews: 429", "remote", r.RemoteAddr, "bytes", r.ContentLength)
		w.Header().Set("Retry-After", strconv.Itoa(retryAfterSeconds))
		http.Error(w, "sidelock injector: busy with other large reviews, retry", http.StatusTooManyRequests)
		return
	}
	defer i.budget.release(size)
	i.serveReview(w, r)
}

// serveReview reads, decodes and answers a review, within the budget.
func (i *Injector) serveReview(w http.ResponseWriter, r *http.Request) {
	body, err := readReview(w, r)
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			i.refuseTooLarge(w, r)
			return
		}
		http.Error(w, "reading the request: "+err.Error(), http.StatusBadRequest)
		return
	}
	out, status := i.Handle(body)
	if status != http.StatusOK {
		i.log.Warn("bad admission request", "remote", r.RemoteAddr, "status", status, "err", string(out))
		http.Error(w, string(out), status)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(out)
}

func (i *Injector) refuseTooLarge(w http.ResponseWriter, r *http.Request) {
	i.log.Warn("AdmissionReview too large: 413", "remote", r.RemoteAddr, "bytes", r.ContentLength, "max", MaxReviewBytes)
	http.Error(w, fmt.Sprintf("AdmissionReview larger than %d bytes", MaxReviewBytes), http.StatusRequestEntityTooLarge)
}

// readReview reads a body of at most MaxReviewBytes. One of announced
// length is read into a buffer of that length: a growing buffer would
// copy it several times over.
func readReview(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	body := http.MaxBytesReader(w, r.Body, MaxReviewBytes)
	if r.ContentLength < 0 {
		return io.ReadAll(body)
	}
	buf := make([]byte, r.ContentLength)
	_, err := io.ReadFull(body, buf)
	return buf, err
}

// Handle answers an AdmissionReview request body with a response body and
// 200, or with a plain-text reason and 400 when body is not a review.
func (i *Injector) Handle(body []byte) ([]byte, int) {
	review, err := DecodeReview(body)
	if err != nil {
		return []byte(clip(err.Error(), maxMessageBytes)), http.StatusBadRequest
	}
	resp := i.Review(review.Request)
	out, err := json.Marshal(AdmissionReview{APIVersion: AdmissionAPIVersion, Kind: AdmissionKind, Response: resp})
	if err != nil { // cannot happen: every field marshals
		return []byte(err.Error()), http.StatusInternalServerError
	}
	return out, http.StatusOK
}

// Review decides on one admission request: the pod unchanged, the pod
// with the sidecar (a JSON patch), or a denial explaining what is wrong.
func (i *Injector) Review(req *AdmissionRequest) *AdmissionResponse {
	resp := &AdmissionResponse{UID: req.UID, Allowed: true}
	log := i.log.With("uid", req.UID, "namespace", req.Namespace, "operation", req.Operation, "dryRun", req.DryRun != nil && *req.DryRun)

	isPod := req.Kind.Group == "" && req.Kind.Kind == "Pod" && req.Resource.Resource == "pods" && req.SubResource == ""
	if !isPod || req.Operation != "CREATE" {
		log.Debug("not a pod creation: unchanged", "kind", req.Kind.Kind, "resource", req.Resource.Resource, "subResource", req.SubResource)
		return resp
	}
	p, err := decodePod(req.Object)
	if err != nil {
		log.Warn("undecodable pod: denied", "err", err)
		return deny(resp, http.StatusBadRequest, "BadRequest", fmt.Sprintf("sidelock injector: cannot decode the pod: %v", err))
	}
	ns := req.Namespace
	if ns == "" {
		ns = p.Metadata.Namespace
	}
	log = log.With("pod", p.displayName())
	patch, warnings, err := i.inject(p, ns)
	resp.Warnings = warnings
	switch {
	case errors.Is(err, errInvalid):
		log.Info("invalid sidelock annotations: denied", "err", err)
		return deny(resp, http.StatusUnprocessableEntity, "Invalid",
			fmt.Sprintf("sidelock injector: pod %s: %s", p.displayName(), strings.ReplaceAll(err.Error(), "\n", "; ")))
	case err != nil:
		log.Error("injection failed: denied", "err", err)
		return deny(resp, http.StatusInternalServerError, "InternalError", "sidelock injector: "+err.Error())
	case patch == nil:
		return resp
	}
	pt := PatchTypeJSONPatch
	resp.Patch, resp.PatchType = patch, &pt
	log.Info("sidecar injected", "container", i.spec.name, "warnings", len(warnings))
	return resp
}

func deny(resp *AdmissionResponse, code int32, reason, msg string) *AdmissionResponse {
	resp.Allowed = false
	resp.Result = &Status{Status: "Failure", Code: code, Reason: reason, Message: clip(msg, maxMessageBytes)}
	return resp
}

// inject returns the JSON patch that adds the sidecar to p, or nil when p
// is to be left alone, with warnings for the user.
func (i *Injector) inject(p *pod, ns string) (patch []byte, warnings []string, err error) {
	var why string
	switch {
	case slices.Contains(i.exclude, ns):
		why = "excluded namespace"
	case p.Metadata.Labels.get(ComponentLabel) == ComponentInjector:
		why = "the injector's own pod"
	case p.Metadata.Labels.get(InjectLabel) == OptOut:
		why = "opted out with " + InjectLabel + `: "false"`
	case p.Metadata.Annotations.get(StatusAnnotation) == StatusInjected:
		why = "already injected"
	case slices.ContainsFunc(slices.Concat(p.Spec.InitContainers, p.Spec.Containers), func(c podContainer) bool { return c.Name == i.spec.name }):
		why = "has a container with the sidecar's name"
		warnings = append(warnings, fmt.Sprintf("sidelock: the pod already has a container named %q; the sidecar was not injected", i.spec.name))
	}
	if why != "" {
		i.log.Debug("unchanged", "pod", p.displayName(), "namespace", ns, "why", why)
		return nil, warnings, nil
	}

	c, err := i.spec.newContainer()
	if err != nil {
		return nil, warnings, err
	}
	if err := applyAnnotations(i.spec, c, p.Metadata.Annotations); err != nil {
		return nil, warnings, err
	}
	if err := checkPorts(p, c); err != nil {
		return nil, warnings, err
	}
	vols := make([]any, 0, len(i.spec.Volumes))
	for _, raw := range i.spec.Volumes {
		var v map[string]any
		if err := json.Unmarshal(raw, &v); err != nil {
			return nil, warnings, err
		}
		if name := v["name"].(string); slices.Contains(p.Spec.Volumes, name) {
			return nil, warnings, invalidf("the pod already has a volume named %q, which the sidecar needs", name)
		}
		vols = append(vols, v)
	}
	appOps, err := i.appOps(p)
	if err != nil {
		return nil, warnings, err
	}
	if refs := c.secretRefs(); len(refs) > 0 && i.spec.ReleaseNamespace != "" && ns != i.spec.ReleaseNamespace {
		// The injector cannot see whether a copy exists (it has no API
		// access, see docs/kubernetes.md), so it says what to do if not.
		nsq := clip(ns, maxQuotedBytes)
		warnings = append(warnings, fmt.Sprintf("sidelock: the sidecar reads Secret %s, which the chart creates in namespace %s; this pod is in %s, so unless a copy is there it stays in CreateContainerConfigError. "+
			"For the masters' password: add %s to the chart's redis.auth.copyTo.namespaces and run helm upgrade (namespaces labelled sidelock-injection=enabled get theirs at each helm upgrade while redis.auth.copyTo.optedInNamespaces is on)",
			strings.Join(refs, ", "), i.spec.ReleaseNamespace, nsq, nsq))
	}

	var ops []patchOp
	if len(p.Spec.InitContainers) == 0 {
		ops = append(ops, patchOp{Op: "add", Path: "/spec/initContainers", Value: []any{c}})
	} else {
		ops = append(ops, patchOp{Op: "add", Path: "/spec/initContainers/0", Value: c})
	}
	if len(vols) > 0 {
		if len(p.Spec.Volumes) == 0 {
			ops = append(ops, patchOp{Op: "add", Path: "/spec/volumes", Value: vols})
		} else {
			for _, v := range vols {
				ops = append(ops, patchOp{Op: "add", Path: "/spec/volumes/-", Value: v})
			}
		}
	}
	ops = append(ops, appOps...) // after the sidecar's insertion, which the init containers' indexes count
	if p.Metadata.Labels.get(InjectLabel) != OptIn {
		ops = append(ops, labelOp(p, InjectLabel, OptIn))
	}
	if !p.Metadata.Annotations.any {
		ops = append(ops, patchOp{Op: "add", Path: "/metadata/annotations", Value: map[string]string{StatusAnnotation: StatusInjected}})
	} else {
		ops = append(ops, patchOp{Op: "add", Path: "/metadata/annotations/" + escapePointer(StatusAnnotation), Value: StatusInjected})
	}
	patch, err = json.Marshal(ops)
	return patch, warnings, err
}

// labelOp sets a label of p: into the existing labels, or as the first.
func labelOp(p *pod, key, value string) patchOp {
	if !p.Metadata.Labels.any {
		return patchOp{Op: "add", Path: "/metadata/labels", Value: map[string]string{key: value}}
	}
	return patchOp{Op: "add", Path: "/metadata/labels/" + escapePointer(key), Value: value}
}

// checkPorts refuses a sidecar port that a container of the pod declares
// too: they share the network namespace, so one of them could not listen.
func checkPorts(p *pod, c container) error {
	listen, _ := c.env(config.EnvListenAddr)
	admin, _ := c.env(config.EnvAdminAddr)
	var errs []error
	for _, pc := range slices.Concat(p.Spec.InitContainers, p.Spec.Containers) {
		for _, port := range pc.Ports {
			if port.Protocol != "" && port.Protocol != "TCP" {
				continue
			}
			n := fmt.Sprint(port.ContainerPort)
			for _, s := range []struct{ what, port, ann string }{{"lock API", portOf(listen), "listen-port"}, {"admin", portOf(admin), "admin-port"}} {
				if n == s.port {
					errs = append(errs, invalidf("container %s uses port %s, which is the sidecar's %s port: set %s%s", pc.Name, n, s.what, Prefix, s.ann))
				}
			}
		}
	}
	return errors.Join(errs...)
}

// appOps give every other container of p (the init containers, which now
// follow the sidecar, and the containers) what the spec says it needs to
// reach the lock API on its Unix socket: the socket's volume mount, and
// SIDELOCK_ADDR unless the container sets it itself.
func (i *Injector) appOps(p *pod) ([]patchOp, error) {
	if len(i.spec.AppVolumeMounts) == 0 && len(i.spec.AppEnv) == 0 {
		return nil, nil
	}
	mounts, err := decodeObjects(i.spec.AppVolumeMounts)
	if err != nil {
		return nil, err
	}
	env, err := decodeObjects(i.spec.AppEnv)
	if err != nil {
		return nil, err
	}
	var ops []patchOp
	var errs []error
	for _, list := range []struct {
		path       string
		shift      int
		containers []podContainer
	}{{"/spec/initContainers", 1, p.Spec.InitContainers}, {"/spec/containers", 0, p.Spec.Containers}} {
		for n, c := range list.containers {
			at := fmt.Sprintf("%s/%d", list.path, n+list.shift)
			var addMounts, addEnv []any
			for _, m := range mounts {
				if path, _ := m["mountPath"].(string); slices.Contains(c.MountPaths, path) {
					errs = append(errs, invalidf("container %s mounts a volume at %s, where the sidecar's socket volume goes", c.Name, path))
					continue
				}
				addMounts = append(addMounts, m)
			}
			for _, e := range env {
				if name, _ := e["name"].(string); !slices.Contains(c.EnvNames, name) {
					addEnv = append(addEnv, e)
				}
			}
			ops = append(ops, appendOps(at+"/volumeMounts", c.HasMounts, addMounts)...)
			ops = append(ops, appendOps(at+"/env", c.HasEnv, addEnv)...)
		}
	}
	return ops, errors.Join(errs...)
}

// decodeObjects decodes JSON objects.
func decodeObjects(raws []json.RawMessage) ([]map[string]any, error) {
	out := make([]map[string]any, len(raws))
	for n, raw := range raws {
		if err := json.Unmarshal(raw, &out[n]); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// appendOps appends items to the list at path, or adds the list when the
// container has none.
func appendOps(path string, exists bool, items []any) []patchOp {
	switch {
	case len(items) == 0:
		return nil
	case !exists:
		return []patchOp{{Op: "add", Path: path, Value: items}}
	}
	ops := make([]patchOp, len(items))
	for n, item := range items {
		ops[n] = patchOp{Op: "add", Path: path + "/-", Value: item}
	}
	return ops
}

// patchOp is one RFC 6902 operation.
type patchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value"`
}

// escapePointer escapes a key for an RFC 6901 JSON pointer.
func escapePointer(key string) string {
	return strings.ReplaceAll(strings.ReplaceAll(key, "~", "~0"), "/", "~1")
}
