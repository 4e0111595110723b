package injector

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"

	"github.com/sidelock/sidelock/internal/config"
)

// Spec is the sidecar the injector adds, exactly as the Helm chart renders
// it: the chart runs its `sidelock.sidecar` named template (the one app
// charts include by hand) into a ConfigMap, and the injector reads that at
// start. The chart's template is thus the one source of truth for the
// container; the injector never builds one itself, it only applies the
// annotation overrides (see Annotations) to a copy.
//
// The file is JSON:
//
//	{
//	  "container": {...},            // sidelock.sidecar, rendered with the readiness probe on
//	  "readinessByDefault": true,    // sidecar.readinessProbe.enabled
//	  "volumes": [...],              // sidelock.volumes (sidecar.extraVolumes, the socket's emptyDir)
//	  "appVolumeMounts": [...],      // sidelock.appVolumeMounts (with sidecar.unixSocket)
//	  "appEnv": [...],               // sidelock.appEnv (with sidecar.unixSocket)
//	  "releaseNamespace": "payments" // where the Secrets the container reads live
//	}
type Spec struct {
	// Container is the rendered container, as JSON.
	Container json.RawMessage `json:"container"`
	// ReadinessByDefault tells whether the readiness probe of Container is
	// kept when a pod has no sidelock.io/readiness-probe annotation.
	ReadinessByDefault bool `json:"readinessByDefault"`
	// Volumes are pod volumes the container mounts; added with it.
	Volumes []json.RawMessage `json:"volumes"`
	// AppVolumeMounts and AppEnv are added to every other container of
	// the pod: what it needs to reach the lock API on a Unix socket.
	AppVolumeMounts []json.RawMessage `json:"appVolumeMounts,omitempty"`
	AppEnv          []json.RawMessage `json:"appEnv,omitempty"`
	// ReleaseNamespace is the namespace of the Secrets the container's
	// environment refers to; pods elsewhere get a warning.
	ReleaseNamespace string `json:"releaseNamespace"`

	name      string // container name
	adminPort int    // containerPort of sidelock-admin
}

// adminPortName is the name of the sidecar's admin containerPort; its
// probes refer to it by name.
const adminPortName = "sidelock-admin"

// LoadSpec reads and checks a spec file.
func LoadSpec(path string) (*Spec, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("sidecar spec: %w", err)
	}
	s, err := ParseSpec(data)
	if err != nil {
		return nil, fmt.Errorf("sidecar spec %s: %w", path, err)
	}
	return s, nil
}

// ParseSpec decodes a spec and checks that the container is one the
// injector can apply its overrides to: a named native sidecar with its
// listen and admin addresses in the environment, the admin port declared
// as sidelock-admin, and a readiness probe (removed per pod as asked).
func ParseSpec(data []byte) (*Spec, error) {
	var s Spec
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return nil, err
	}
	c, err := s.newContainer()
	if err != nil {
		return nil, fmt.Errorf("container: %w", err)
	}
	name, _ := c["name"].(string)
	if name == "" {
		return nil, fmt.Errorf("container has no name")
	}
	s.name = name
	if rp, _ := c["restartPolicy"].(string); rp != "Always" {
		return nil, fmt.Errorf("container %s: restartPolicy %q, want Always (a native sidecar)", name, rp)
	}
	if img, _ := c["image"].(string); img == "" {
		return nil, fmt.Errorf("container %s has no image", name)
	}
	for _, v := range []string{config.EnvListenAddr, config.EnvAdminAddr} {
		addr, ok := c.env(v)
		if !ok {
			return nil, fmt.Errorf("container %s does not set %s", name, v)
		}
		if v == config.EnvListenAddr && isUnixSocket(addr) {
			continue
		}
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return nil, fmt.Errorf("container %s: %s=%q is not host:port", name, v, addr)
		}
	}
	port := c.adminPort()
	if port == nil {
		return nil, fmt.Errorf("container %s has no port named %s", name, adminPortName)
	}
	n, err := strconv.Atoi(fmt.Sprint(port["containerPort"]))
	if err != nil {
		return nil, fmt.Errorf("container %s: port %s: bad containerPort %v", name, adminPortName, port["containerPort"])
	}
	admin, _ := c.env(config.EnvAdminAddr)
	if _, p, _ := net.SplitHostPort(admin); p != strconv.Itoa(n) {
		return nil, fmt.Errorf("container %s: %s=%q does not listen on port %s=%d", name, config.EnvAdminAddr, admin, adminPortName, n)
	}
	s.adminPort = n
	if _, ok := c["readinessProbe"].(map[string]any); !ok {
		return nil, fmt.Errorf("container %s has no readinessProbe (render it with sidecar.readinessProbe.enabled=true and set readinessByDefault)", name)
	}
	for i, v := range s.Volumes {
		if !hasString(v, "name") {
			return nil, fmt.Errorf("volume %d has no name", i)
		}
	}
	for i, m := range s.AppVolumeMounts {
		if !hasString(m, "name") || !hasString(m, "mountPath") {
			return nil, fmt.Errorf("appVolumeMounts %d has no name or mountPath", i)
		}
	}
	for i, e := range s.AppEnv {
		if !hasString(e, "name") {
			return nil, fmt.Errorf("appEnv %d has no name", i)
		}
	}
	return &s, nil
}

// hasString reports whether the JSON object raw has a non-empty string
// member key.
func hasString(raw json.RawMessage, key string) bool {
	var o map[string]any
	if err := json.Unmarshal(raw, &o); err != nil {
		return false
	}
	s, _ := o[key].(string)
	return s != ""
}

// isUnixSocket reports whether a SIDELOCK_LISTEN_ADDR is a Unix socket
// (the sidecar checks its path at start).
func isUnixSocket(addr string) bool { return strings.HasPrefix(addr, config.UnixScheme) }

// ContainerName is the name of the injected container.
func (s *Spec) ContainerName() string { return s.name }

// newContainer decodes a fresh copy of the container.
func (s *Spec) newContainer() (container, error) {
	var c container
	dec := json.NewDecoder(bytes.NewReader(s.Container))
	dec.UseNumber() // numbers stay as written
	if err := dec.Decode(&c); err != nil {
		return nil, err
	}
	if c == nil {
		return nil, fmt.Errorf("missing")
	}
	return c, nil
}

// container is a container as generic JSON, so that every field the chart
// renders is carried over, including fields this package knows nothing of.
type container map[string]any

func (c container) envList() []any {
	l, _ := c["env"].([]any)
	return l
}

// env returns the literal value of a variable.
func (c container) env(name string) (string, bool) {
	for _, e := range c.envList() {
		if m, ok := e.(map[string]any); ok && m["name"] == name {
			v, ok := m["value"].(string)
			return v, ok
		}
	}
	return "", false
}

// hasEnv tells whether the container sets the variable name at all, by
// value or from elsewhere (valueFrom).
func (c container) hasEnv(name string) bool {
	for _, e := range c.envList() {
		if m, ok := e.(map[string]any); ok && m["name"] == name {
			return true
		}
	}
	return false
}

// setEnv sets a variable in place, or appends it.
func (c container) setEnv(name, value string) {
	for _, e := range c.envList() {
		if m, ok := e.(map[string]any); ok && m["name"] == name {
			delete(m, "valueFrom")
			m["value"] = value
			return
		}
	}
	c["env"] = append(c.envList(), map[string]any{"name": name, "value": value})
}

// secretRefs lists the Secrets the environment reads.
func (c container) secretRefs() []string {
	var refs []string
	for _, e := range c.envList() {
		m, _ := e.(map[string]any)
		vf, _ := m["valueFrom"].(map[string]any)
		ref, _ := vf["secretKeyRef"].(map[string]any)
		if name, _ := ref["name"].(string); name != "" {
			refs = append(refs, name)
		}
	}
	return refs
}

func (c container) adminPort() map[string]any {
	ports, _ := c["ports"].([]any)
	for _, p := range ports {
		if m, ok := p.(map[string]any); ok && m["name"] == adminPortName {
			return m
		}
	}
	return nil
}

// resources returns resources.<kind> (requests or limits), creating it.
func (c container) resources(kind string) map[string]any {
	r, _ := c["resources"].(map[string]any)
	if r == nil {
		r = map[string]any{}
		c["resources"] = r
	}
	l, _ := r[kind].(map[string]any)
	if l == nil {
		l = map[string]any{}
		r[kind] = l
	}
	return l
}

func (c container) resource(kind, name string) (string, bool) {
	r, _ := c["resources"].(map[string]any)
	l, _ := r[kind].(map[string]any)
	switch v := l[name].(type) {
	case string:
		return v, true
	case json.Number:
		return v.String(), true
	}
	return "", false
}
