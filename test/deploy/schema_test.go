package deploy

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chartutil"
)

// jsonSchema is a (sub)schema of values.schema.json, as decoded JSON.
type jsonSchema = map[string]any

func loadSchema(t *testing.T) jsonSchema {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(chartDir, "values.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	var s jsonSchema
	if err := json.Unmarshal(data, &s); err != nil {
		t.Fatal(err)
	}
	return s
}

// openMaps are the only objects whose keys are not ours: Helm's global
// values (owned by a parent chart), nodeSelectors and the maps of labels
// and annotations (label keys), and the parts of an affinity (Kubernetes
// types, deep and validated by the API server).
var openMaps = []string{
	"/properties/global", "/properties/redis/properties/nodeSelector", "/properties/injector/properties/nodeSelector",
	"/definitions/stringMap",
	"/definitions/affinity/properties/nodeAffinity", "/definitions/affinity/properties/podAffinity", "/definitions/affinity/properties/podAntiAffinity",
}

// kubernetesShaped values are checked at their top only: their members are
// optional by design.
var kubernetesShaped = []string{"resources", "affinity", "clientNamespaceSelector"}

// Every object in the schema rejects unknown keys, so a mistyped value
// fails instead of being ignored.
func TestValuesSchemaIsClosed(t *testing.T) {
	var walk func(ptr string, s jsonSchema)
	walk = func(ptr string, s jsonSchema) {
		if _, isObject := s["properties"]; isObject || s["type"] == "object" {
			switch ap, set := s["additionalProperties"]; {
			case slices.Contains(openMaps, ptr):
				if sub, ok := ap.(jsonSchema); set && (!ok || sub["type"] == "object") {
					t.Errorf("%s: free-form map with non-scalar values", ptr)
				}
			case ap != false:
				t.Errorf("%s: additionalProperties is %v, want false", ptr, ap)
			}
		}
		// Only schemas that define values; the conditions in
		// allOf/anyOf/oneOf/if/then only constrain them.
		for _, key := range []string{"properties", "definitions"} {
			children, _ := s[key].(jsonSchema)
			for name, child := range children {
				walk(ptr+"/"+key+"/"+name, child.(jsonSchema))
			}
		}
		if items, ok := s["items"].(jsonSchema); ok {
			walk(ptr+"/items", items)
		}
	}
	walk("", loadSchema(t))
}

// Every key the schema allows has a default in values.yaml, where it is
// documented; the reverse holds because the defaults pass the schema.
// Kubernetes-shaped blocks (kubernetesShaped) are checked at their top only.
func TestValuesAreDocumented(t *testing.T) {
	schema := loadSchema(t)
	defaults, err := chartutil.ReadValuesFile(filepath.Join(chartDir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	resolve := func(s jsonSchema) jsonSchema {
		if ref, ok := s["$ref"].(string); ok {
			return schema["definitions"].(jsonSchema)[strings.TrimPrefix(ref, "#/definitions/")].(jsonSchema)
		}
		return s
	}
	var walk func(path string, s jsonSchema, v map[string]any)
	walk = func(path string, s jsonSchema, v map[string]any) {
		props, _ := resolve(s)["properties"].(jsonSchema)
		for name, child := range props {
			val, ok := v[name]
			switch {
			case path == "" && name == "global":
			case !ok:
				t.Errorf("%s%s: allowed by the schema but not in values.yaml", path, name)
			default:
				if m, isMap := val.(map[string]any); isMap && !slices.Contains(kubernetesShaped, name) {
					walk(path+name+".", child.(jsonSchema), m)
				}
			}
		}
	}
	walk("", schema, defaults)
}
