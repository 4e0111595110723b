package deploy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/scheme"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// object is a decoded Kubernetes object and where it came from.
type object struct {
	source string
	obj    runtime.Object
}

func (o object) meta() metav1.Object {
	m, err := meta.Accessor(o.obj)
	if err != nil {
		panic(err) // every type in the scheme has ObjectMeta
	}
	return m
}

func (o object) String() string {
	gvk := o.obj.GetObjectKind().GroupVersionKind()
	return fmt.Sprintf("%s %s (%s)", gvk.Kind, o.meta().GetName(), o.source)
}

var docSeparator = regexp.MustCompile(`(?m)^---[ \t]*(#.*)?$`)

// decodeStream strictly decodes every non-empty YAML document of a stream.
func decodeStream(source string, stream []byte) ([]object, error) {
	var objs []object
	for i, doc := range docSeparator.Split(string(stream), -1) {
		obj, err := decodeStrict([]byte(doc))
		if err != nil {
			return nil, fmt.Errorf("%s, document %d: %w", source, i, err)
		}
		if obj != nil {
			objs = append(objs, object{source: source, obj: obj})
		}
	}
	return objs, nil
}

// decodeStrict decodes one YAML document into the Go type that
// client-go's scheme registers for its apiVersion and kind, as the API
// server would: unknown kinds, unknown or mis-cased fields and duplicate keys
// are errors. An empty (or comment-only) document gives nil.
func decodeStrict(doc []byte) (runtime.Object, error) {
	js, err := yaml.YAMLToJSONStrict(doc) // rejects duplicate keys
	if err != nil {
		return nil, err
	}
	if bytes.Equal(bytes.TrimSpace(js), []byte("null")) {
		return nil, nil
	}
	var tm metav1.TypeMeta
	if err := json.Unmarshal(js, &tm); err != nil {
		return nil, err
	}
	if tm.APIVersion == "" || tm.Kind == "" {
		return nil, fmt.Errorf("no apiVersion/kind in %s", js)
	}
	gvk := schema.FromAPIVersionAndKind(tm.APIVersion, tm.Kind)
	var obj runtime.Object
	if newObj, ok := extraKinds[gvk]; ok {
		obj = newObj()
	} else if obj, err = scheme.Scheme.New(gvk); err != nil {
		return nil, fmt.Errorf("unknown kind: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	if err := dec.Decode(obj); err != nil {
		return nil, fmt.Errorf("%s: %w", gvk.Kind, err)
	}
	// encoding/json matches field names case-insensitively
	// ("ImagePullPolicy" would pass above); the API server does not.
	strictErrs, err := kjson.UnmarshalStrict(js, obj.DeepCopyObject())
	if err == nil && len(strictErrs) > 0 {
		err = fmt.Errorf("%v", strictErrs)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", gvk.Kind, err)
	}
	if m, _ := meta.Accessor(obj); m.GetName() == "" {
		return nil, fmt.Errorf("%s without metadata.name", gvk.Kind)
	}
	return obj, nil
}

// ofType returns the objects of one Go type, e.g. ofType[*appsv1.StatefulSet].
func ofType[T runtime.Object](objs []object) []T {
	var out []T
	for _, o := range objs {
		if t, ok := o.obj.(T); ok {
			out = append(out, t)
		}
	}
	return out
}

// named returns the object of type T with that name, or nil.
func named[T interface {
	runtime.Object
	GetName() string
}](objs []object, name string) T {
	for _, t := range ofType[T](objs) {
		if t.GetName() == name {
			return t
		}
	}
	var zero T
	return zero
}
