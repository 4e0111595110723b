package injector_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// applyPatch applies an RFC 6902 JSON patch (add, remove, replace: what
// an admission webhook may reasonably send) to doc, strictly: a path
// whose parent does not exist, or an index out of range, is an error, as
// it is for the API server.
func applyPatch(doc, patch []byte) ([]byte, error) {
	root, err := decodeJSON(doc)
	if err != nil {
		return nil, fmt.Errorf("document: %w", err)
	}
	var ops []struct {
		Op    string           `json:"op"`
		Path  *string          `json:"path"`
		Value *json.RawMessage `json:"value"`
	}
	dec := json.NewDecoder(bytes.NewReader(patch))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&ops); err != nil {
		return nil, fmt.Errorf("patch: %w", err)
	}
	for i, op := range ops {
		if op.Path == nil {
			return nil, fmt.Errorf("op %d: no path", i)
		}
		var value any
		if op.Op == "add" || op.Op == "replace" {
			if op.Value == nil {
				return nil, fmt.Errorf("op %d: %s without value", i, op.Op)
			}
			if value, err = decodeJSON(*op.Value); err != nil {
				return nil, err
			}
		}
		if root, err = applyOp(root, op.Op, *op.Path, value); err != nil {
			return nil, fmt.Errorf("op %d (%s %s): %w", i, op.Op, *op.Path, err)
		}
	}
	return json.Marshal(root)
}

func decodeJSON(b []byte) (any, error) {
	var v any
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	err := dec.Decode(&v)
	return v, err
}

func applyOp(root any, op, path string, value any) (any, error) {
	if path == "" {
		if op == "remove" {
			return nil, fmt.Errorf("cannot remove the root")
		}
		return value, nil
	}
	if !strings.HasPrefix(path, "/") {
		return nil, fmt.Errorf("path does not start with /")
	}
	tokens := strings.Split(path[1:], "/")
	for i, t := range tokens {
		tokens[i] = strings.ReplaceAll(strings.ReplaceAll(t, "~1", "/"), "~0", "~")
	}
	return set(root, tokens, op, value)
}

// set applies op at tokens below node and returns the new node.
func set(node any, tokens []string, op string, value any) (any, error) {
	key, last := tokens[0], len(tokens) == 1
	switch n := node.(type) {
	case map[string]any:
		child, exists := n[key]
		if !last {
			if !exists {
				return nil, fmt.Errorf("no member %q", key)
			}
			v, err := set(child, tokens[1:], op, value)
			n[key] = v
			return n, err
		}
		switch op {
		case "add":
			n[key] = value
		case "replace":
			if !exists {
				return nil, fmt.Errorf("replace of missing member %q", key)
			}
			n[key] = value
		case "remove":
			if !exists {
				return nil, fmt.Errorf("remove of missing member %q", key)
			}
			delete(n, key)
		default:
			return nil, fmt.Errorf("unsupported op %q", op)
		}
		return n, nil
	case []any:
		idx := len(n)
		if key != "-" {
			i, err := strconv.Atoi(key)
			if err != nil || i < 0 || strconv.Itoa(i) != key {
				return nil, fmt.Errorf("bad array index %q", key)
			}
			idx = i
		}
		if !last {
			if idx >= len(n) {
				return nil, fmt.Errorf("index %d out of range", idx)
			}
			v, err := set(n[idx], tokens[1:], op, value)
			n[idx] = v
			return n, err
		}
		switch op {
		case "add":
			if idx > len(n) {
				return nil, fmt.Errorf("index %d out of range", idx)
			}
			return append(n[:idx], append([]any{value}, n[idx:]...)...), nil
		case "replace", "remove":
			if idx >= len(n) {
				return nil, fmt.Errorf("index %d out of range", idx)
			}
			if op == "remove" {
				return append(n[:idx], n[idx+1:]...), nil
			}
			n[idx] = value
			return n, nil
		}
		return nil, fmt.Errorf("unsupported op %q", op)
	}
	return nil, fmt.Errorf("%q: not an object or array", key)
}
