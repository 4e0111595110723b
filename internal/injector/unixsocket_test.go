package injector_test

import (
	"strings"
	"testing"

	"github.com/sidelock/sidelock/internal/injector"
)

const socketAddr = "unix:///run/sidelock/api.sock"

// socketSpec is the test spec as the chart renders it with
// sidecar.unixSocket: the sidecar on the socket, its emptyDir, and what
// the app's containers get.
func socketSpec(t *testing.T) *injector.Spec {
	t.Helper()
	return specWith(t, func(m map[string]any) {
		c := m["container"].(map[string]any)
		for _, e := range c["env"].([]any) {
			if e := e.(map[string]any); e["name"] == "SIDELOCK_LISTEN_ADDR" {
				e["value"] = socketAddr
			}
		}
		mount := map[string]any{"name": "sidelock-socket", "mountPath": "/run/sidelock"}
		c["volumeMounts"] = []any{mount}
		m["volumes"] = []any{map[string]any{"name": "sidelock-socket", "emptyDir": map[string]any{}}}
		m["appVolumeMounts"] = []any{mount}
		m["appEnv"] = []any{map[string]any{"name": "SIDELOCK_ADDR", "value": socketAddr}}
	})
}

// Every container of the pod (init containers, which now follow the
// sidecar, and the others) mounts the socket's volume and gets
// SIDELOCK_ADDR, unless it sets SIDELOCK_ADDR itself.
func TestSocketMountAddedToEveryContainer(t *testing.T) {
	inj := newInjector(t, socketSpec(t))
	doc := podJSON(optIn, nil, `,"initContainers":[{"name":"migrate","image":"m:1","env":[{"name":"SIDELOCK_ADDR","value":"mine"}]}]`)
	doc = strings.Replace(doc, `"ports":[{"containerPort":8080}]`, `"ports":[{"containerPort":8080}],"volumeMounts":[{"name":"data","mountPath":"/data"}]`, 1)
	p := mutated(t, doc, post(t, inj, reviewBody(t, request("u", "shop", "CREATE", doc))))
	spec := p["spec"].(map[string]any)
	inits := initContainers(p)
	if len(inits) != 2 || inits[0]["name"] != "sidelock" || inits[1]["name"] != "migrate" {
		t.Fatalf("init containers %v", inits)
	}
	web := spec["containers"].([]any)[0].(map[string]any)
	for _, c := range []map[string]any{inits[0], inits[1], web} {
		if !mounts(c, "sidelock-socket", "/run/sidelock") {
			t.Errorf("container %s does not mount the socket's volume: %v", c["name"], c["volumeMounts"])
		}
	}
	if !mounts(web, "data", "/data") {
		t.Errorf("web lost its own mount: %v", web["volumeMounts"])
	}
	if v, _ := envOf(web, "SIDELOCK_ADDR"); v != socketAddr {
		t.Errorf("web: SIDELOCK_ADDR=%q, want %s", v, socketAddr)
	}
	if v, _ := envOf(inits[1], "SIDELOCK_ADDR"); v != "mine" || len(inits[1]["env"].([]any)) != 1 {
		t.Errorf("migrate's own SIDELOCK_ADDR was changed or doubled: %v", inits[1]["env"])
	}
}

func mounts(c map[string]any, name, path string) bool {
	l, _ := c["volumeMounts"].([]any)
	for _, m := range l {
		if m := m.(map[string]any); m["name"] == name && m["mountPath"] == path {
			return true
		}
	}
	return false
}

// A pod that mounts something at the socket's directory, or asks for a
// port of a sidecar that has none, is refused with the reason.
func TestSocketConflictsDenied(t *testing.T) {
	inj := newInjector(t, socketSpec(t))
	for _, c := range []struct {
		name, doc, want string
	}{
		{"mount at the socket's directory", strings.Replace(podJSON(optIn, nil, ""), `"ports":[{"containerPort":8080}]`,
			`"volumeMounts":[{"name":"x","mountPath":"/run/sidelock"}]`, 1), "container web mounts a volume at /run/sidelock"},
		{"listen-port annotation", podJSON(optIn, map[string]string{"sidelock.io/listen-port": "7500"}, ""), "Unix socket"},
	} {
		resp := post(t, inj, reviewBody(t, request("u", "shop", "CREATE", c.doc)))
		if resp.Allowed || resp.Result == nil || !strings.Contains(resp.Result.Message, c.want) {
			t.Errorf("%s: %+v %+v; want a denial saying %q", c.name, resp, resp.Result, c.want)
		}
	}
}
