package injector

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// The few admission.k8s.io/v1 and core/v1 fields the injector reads or
// writes, with the API's JSON names. The root module does not depend on
// k8s.io/api (it would weigh on the binary and its go.mod); test/deploy
// checks these types against it by strict decoding.

// AdmissionAPIVersion and AdmissionKind identify an AdmissionReview v1.
const (
	AdmissionAPIVersion = "admission.k8s.io/v1"
	AdmissionKind       = "AdmissionReview"
)

// AdmissionReview is the envelope of a webhook call and of its answer.
type AdmissionReview struct {
	APIVersion string             `json:"apiVersion"`
	Kind       string             `json:"kind"`
	Request    *AdmissionRequest  `json:"request,omitempty"`
	Response   *AdmissionResponse `json:"response,omitempty"`
}

// GroupVersionKind names the kind of the object under admission.
type GroupVersionKind struct {
	Group   string `json:"group"`
	Version string `json:"version"`
	Kind    string `json:"kind"`
}

// GroupVersionResource names the resource under admission.
type GroupVersionResource struct {
	Group    string `json:"group"`
	Version  string `json:"version"`
	Resource string `json:"resource"`
}

// AdmissionRequest is the part of the API server's request the injector
// uses; other fields (userInfo, oldObject, options...) are ignored.
type AdmissionRequest struct {
	UID         string               `json:"uid"`
	Kind        GroupVersionKind     `json:"kind"`
	Resource    GroupVersionResource `json:"resource"`
	SubResource string               `json:"subResource,omitempty"`
	Name        string               `json:"name,omitempty"`
	Namespace   string               `json:"namespace,omitempty"`
	Operation   string               `json:"operation"`
	Object      json.RawMessage      `json:"object,omitempty"`
	DryRun      *bool                `json:"dryRun,omitempty"`
}

// AdmissionResponse is the injector's answer.
type AdmissionResponse struct {
	UID       string   `json:"uid"`
	Allowed   bool     `json:"allowed"`
	Result    *Status  `json:"status,omitempty"`
	Patch     []byte   `json:"patch,omitempty"` // JSON patch; base64 in JSON, as the API wants
	PatchType *string  `json:"patchType,omitempty"`
	Warnings  []string `json:"warnings,omitempty"`
}

// Status is a metav1.Status: why a request was denied.
type Status struct {
	Status  string `json:"status,omitempty"` // "Failure"
	Message string `json:"message,omitempty"`
	Reason  string `json:"reason,omitempty"`
	Code    int32  `json:"code,omitempty"`
}

// PatchTypeJSONPatch is the only patch type admission webhooks may return.
const PatchTypeJSONPatch = "JSONPatch"

// ErrMalformed is returned by DecodeReview for anything that is not an
// AdmissionReview v1 request the injector can answer.
var ErrMalformed = errors.New("malformed AdmissionReview")

// DecodeReview parses an AdmissionReview v1 request. Unknown fields are
// allowed (the API server sends many the injector does not need); a wrong
// apiVersion or kind, a missing request, a missing or oversized uid, or
// trailing data are not. The error quotes the body only in clipped bits.
func DecodeReview(body []byte) (*AdmissionReview, error) {
	var r AdmissionReview
	// Unmarshal, not a Decoder: that would copy the body into its buffer.
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	switch {
	case r.APIVersion != AdmissionAPIVersion || r.Kind != AdmissionKind:
		return nil, fmt.Errorf("%w: apiVersion %s kind %s, want %s %s (admissionReviewVersions: [v1])",
			ErrMalformed, quote(r.APIVersion), quote(r.Kind), AdmissionAPIVersion, AdmissionKind)
	case r.Request == nil:
		return nil, fmt.Errorf("%w: no request", ErrMalformed)
	case r.Request.UID == "":
		return nil, fmt.Errorf("%w: request without uid", ErrMalformed)
	case len(r.Request.UID) > maxUIDBytes:
		return nil, fmt.Errorf("%w: uid of %d bytes, at most %d", ErrMalformed, len(r.Request.UID), maxUIDBytes)
	}
	return &r, nil
}

// pod is what the injector reads of a Pod.
type pod struct {
	Metadata struct {
		Name         string
		GenerateName string
		Namespace    string
		Labels       sidelockEntries
		Annotations  sidelockEntries
	}
	Spec struct {
		InitContainers []podContainer
		Containers     []podContainer
		Volumes        []string // names
	}
}

type podContainer struct {
	Name  string
	Ports []podPort
	// EnvNames and MountPaths are its variables and where its volumes
	// are mounted; HasEnv and HasMounts whether the lists exist (a patch
	// appends to a list, or adds it).
	EnvNames          []string
	MountPaths        []string
	HasEnv, HasMounts bool
}

type podPort struct {
	ContainerPort int32
	Protocol      string
}

// object is a JSON object with its keys as they are: the injector must
// see the pod exactly as the API server will apply its patch to it, so
// unlike encoding/json's struct decoding, no key matches another case
// ("Metadata" is not metadata).
type object map[string]span

// span is a JSON value within a document held for the whole review:
// unlike json.RawMessage, it refers to the document's bytes instead of
// copying them (a pod may be megabytes, its metadata most of that). Only
// json.Unmarshal, whose input is the caller's and is left alone, may fill
// one: a json.Decoder reuses its buffer.
type span []byte

func (s *span) UnmarshalJSON(data []byte) error {
	*s = data[:len(data):len(data)]
	return nil
}

func decodeObject(raw []byte, what string) (object, error) {
	var o object
	if err := json.Unmarshal(raw, &o); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	if o == nil {
		return nil, fmt.Errorf("%s: not an object", what)
	}
	return o, nil
}

// field decodes member key into v when present and not null.
func (o object) field(key string, v any) error {
	raw, ok := o[key]
	if !ok || string(raw) == "null" {
		return nil
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return fmt.Errorf("%s: %w", key, err)
	}
	return nil
}

// decodePod reads the fields the injector needs. metadata and spec must
// be objects: the patch adds to them.
func decodePod(raw json.RawMessage) (*pod, error) {
	top, err := decodeObject(raw, "pod")
	if err != nil {
		return nil, err
	}
	var p pod
	meta, err := decodeObject(top["metadata"], "metadata")
	if err != nil {
		return nil, err
	}
	m := &p.Metadata
	for key, v := range map[string]any{"name": &m.Name, "generateName": &m.GenerateName, "namespace": &m.Namespace, "labels": &m.Labels, "annotations": &m.Annotations} {
		if err := meta.field(key, v); err != nil {
			return nil, fmt.Errorf("metadata.%w", err)
		}
	}
	spec, err := decodeObject(top["spec"], "spec")
	if err != nil {
		return nil, err
	}
	for key, list := range map[string]*[]podContainer{"initContainers": &p.Spec.InitContainers, "containers": &p.Spec.Containers} {
		var items []span
		if err := spec.field(key, &items); err != nil {
			return nil, fmt.Errorf("spec.%w", err)
		}
		for i, item := range items {
			c, err := decodeContainer(item)
			if err != nil {
				return nil, fmt.Errorf("spec.%s[%d]: %w", key, i, err)
			}
			*list = append(*list, c)
		}
	}
	var vols []span
	if err := spec.field("volumes", &vols); err != nil {
		return nil, fmt.Errorf("spec.%w", err)
	}
	for i, v := range vols {
		var name string
		o, err := decodeObject(v, fmt.Sprintf("spec.volumes[%d]", i))
		if err == nil {
			err = o.field("name", &name)
		}
		if err != nil {
			return nil, err
		}
		p.Spec.Volumes = append(p.Spec.Volumes, name)
	}
	return &p, nil
}

func decodeContainer(raw span) (podContainer, error) {
	var c podContainer
	o, err := decodeObject(raw, "container")
	if err != nil {
		return c, err
	}
	if err := o.field("name", &c.Name); err != nil {
		return c, err
	}
	var ports []span
	if err := o.field("ports", &ports); err != nil {
		return c, err
	}
	for i, raw := range ports {
		var port podPort
		po, err := decodeObject(raw, fmt.Sprintf("ports[%d]", i))
		if err == nil {
			err = po.field("containerPort", &port.ContainerPort)
		}
		if err == nil {
			err = po.field("protocol", &port.Protocol)
		}
		if err != nil {
			return c, err
		}
		c.Ports = append(c.Ports, port)
	}
	if c.EnvNames, c.HasEnv, err = decodeItems(o, "env", "name"); err != nil {
		return c, err
	}
	c.MountPaths, c.HasMounts, err = decodeItems(o, "volumeMounts", "mountPath")
	return c, err
}

// decodeItems reads member key of every object in the list o[list], and
// whether the list is there (not absent or null).
func decodeItems(o object, list, key string) (values []string, present bool, err error) {
	var items []span
	if err := o.field(list, &items); err != nil {
		return nil, false, err
	}
	for i, raw := range items {
		var v string
		item, err := decodeObject(raw, fmt.Sprintf("%s[%d]", list, i))
		if err == nil {
			err = item.field(key, &v)
		}
		if err != nil {
			return nil, false, err
		}
		values = append(values, v)
	}
	return values, items != nil, nil
}

// displayName names the pod in messages (it has no name yet when its
// controller gives only generateName), clipped: names are validated only
// after admission.
func (p *pod) displayName() string {
	switch {
	case p.Metadata.Name != "":
		return clip(p.Metadata.Name, maxQuotedBytes)
	case p.Metadata.GenerateName != "":
		return clip(p.Metadata.GenerateName, maxQuotedBytes) + "<generated>"
	}
	return "<unnamed>"
}

// sidelockEntries is a pod's labels or annotations as far as the injector
// reads them: the entries under Prefix, at most maxSidelockAnnotations of
// them besides the injector's own keys (always kept: dropping the opt-in
// label would admit a pod without the sidecar it asked for). The others
// are only counted: the API server validates sizes only after admission,
// so a pod under review may carry hundreds of thousands of entries, and a
// map of them would take several times their size.
type sidelockEntries struct {
	kept     map[string]string
	prefixed int  // entries under Prefix, kept or not
	any      bool // whether there is any entry at all
}

// get returns a kept entry.
func (e sidelockEntries) get(key string) string { return e.kept[key] }

// UnmarshalJSON walks a JSON object of strings (a null value reads as ""),
// keeping what sidelockEntries says. It allocates nothing for the entries
// it only counts: json.Unmarshal has checked that data is valid JSON, so
// finding the strings' ends is all the parsing there is to do.
func (e *sidelockEntries) UnmarshalJSON(data []byte) error {
	rest := bytes.TrimSpace(data)
	if string(rest) == "null" {
		return nil
	}
	if !bytes.HasPrefix(rest, []byte("{")) {
		return errors.New("not an object")
	}
	rest = rest[1:]
	for {
		rest = bytes.TrimLeft(rest, " \t\r\n,")
		if len(rest) == 0 || rest[0] == '}' {
			return nil
		}
		key, afterKey, err := cutString(rest)
		if err != nil {
			return err
		}
		value := bytes.TrimLeft(afterKey, " \t\r\n:")
		var raw []byte // nil for null
		if bytes.HasPrefix(value, []byte("null")) {
			rest = value[len("null"):]
		} else if raw, rest, err = cutString(value); err != nil {
			k, _ := unquote(key)
			return fmt.Errorf("%s: not a string", quote(k))
		}
		if err := e.addRaw(key, raw); err != nil {
			return err
		}
	}
}

// cutString splits b after the JSON string it starts with (quotes
// included).
func cutString(b []byte) (str, rest []byte, err error) {
	if len(b) == 0 || b[0] != '"' {
		return nil, nil, errors.New("not a string")
	}
	for i := 1; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++ // the escaped byte, which may be a quote
		case '"':
			return b[:i+1], b[i+1:], nil
		}
	}
	return nil, nil, errors.New("unterminated string")
}

// unquote decodes a JSON string; without escapes, that is a slice of it.
func unquote(raw []byte) (string, error) {
	if !bytes.ContainsRune(raw, '\\') {
		return string(raw[1 : len(raw)-1]), nil
	}
	var s string
	err := json.Unmarshal(raw, &s)
	return s, err
}

// addRaw adds the entry of a quoted key and value (nil: null), decoding
// them only if the entry is to be kept.
func (e *sidelockEntries) addRaw(rawKey, rawValue []byte) error {
	e.any = true
	if !bytes.ContainsRune(rawKey, '\\') && !bytes.HasPrefix(rawKey[1:], []byte(Prefix)) {
		return nil // the common case: counted, never copied
	}
	key, err := unquote(rawKey)
	if err != nil || !e.wants(key) {
		return err
	}
	value := ""
	if rawValue != nil {
		if value, err = unquote(rawValue); err != nil {
			return err
		}
	}
	e.kept[key] = value
	return nil
}

// wants counts an entry and tells whether to keep it.
func (e *sidelockEntries) wants(key string) bool {
	if !strings.HasPrefix(key, Prefix) {
		return false
	}
	e.prefixed++
	if e.kept == nil {
		e.kept = map[string]string{}
	}
	_, dup := e.kept[key]
	own := key == InjectLabel || key == ComponentLabel || key == StatusAnnotation
	return dup || own || len(e.kept) < maxSidelockAnnotations
}
