package injector

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
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

// maxReviewBytes bounds a request body. The API server's own limit on an
// object is 3 MiB; the review around it adds little.
const maxReviewBytes = 4 << 20

// ErrMalformed is returned by DecodeReview for anything that is not an
// AdmissionReview v1 request the injector can answer.
var ErrMalformed = errors.New("malformed AdmissionReview")

// DecodeReview parses an AdmissionReview v1 request. Unknown fields are
// allowed (the API server sends many the injector does not need); a wrong
// apiVersion or kind, a missing request or uid, or trailing data are not.
func DecodeReview(body []byte) (*AdmissionReview, error) {
	var r AdmissionReview
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&r); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%w: data after the review", ErrMalformed)
	}
	switch {
	case r.APIVersion != AdmissionAPIVersion || r.Kind != AdmissionKind:
		return nil, fmt.Errorf("%w: apiVersion %q kind %q, want %s %s (admissionReviewVersions: [v1])",
			ErrMalformed, r.APIVersion, r.Kind, AdmissionAPIVersion, AdmissionKind)
	case r.Request == nil:
		return nil, fmt.Errorf("%w: no request", ErrMalformed)
	case r.Request.UID == "":
		return nil, fmt.Errorf("%w: request without uid", ErrMalformed)
	}
	return &r, nil
}

// pod is what the injector reads of a Pod.
type pod struct {
	Metadata struct {
		Name         string
		GenerateName string
		Namespace    string
		Labels       map[string]string
		Annotations  map[string]string
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
}

type podPort struct {
	ContainerPort int32
	Protocol      string
}

// object is a JSON object with its keys as they are: the injector must
// see the pod exactly as the API server will apply its patch to it, so
// unlike encoding/json's struct decoding, no key matches another case
// ("Metadata" is not metadata).
type object map[string]json.RawMessage

func decodeObject(raw json.RawMessage, what string) (object, error) {
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
		var items []json.RawMessage
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
	var vols []json.RawMessage
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

func decodeContainer(raw json.RawMessage) (podContainer, error) {
	var c podContainer
	o, err := decodeObject(raw, "container")
	if err != nil {
		return c, err
	}
	if err := o.field("name", &c.Name); err != nil {
		return c, err
	}
	var ports []json.RawMessage
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
	return c, nil
}

// displayName names the pod in messages (it has no name yet when its
// controller gives only generateName).
func (p *pod) displayName() string {
	switch {
	case p.Metadata.Name != "":
		return p.Metadata.Name
	case p.Metadata.GenerateName != "":
		return p.Metadata.GenerateName + "<generated>"
	}
	return "<unnamed>"
}
