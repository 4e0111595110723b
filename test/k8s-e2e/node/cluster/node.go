package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// startContainerd starts Debian's containerd with the CRI plugin and the
// pods' CNI network.
func (c *Cluster) startContainerd(ctx context.Context) error {
	dir := filepath.Join(c.Dir, "containerd")
	if err := writeFile(filepath.Join(dir, "net.d", "10-sidelock-e2e.conflist"), cniConfig(filepath.Join(dir, "ipam"))); err != nil {
		return err
	}
	cfg := filepath.Join(dir, "config.toml")
	if err := writeFile(cfg, containerdConfig(dir, c.socket, c.opts.Pause)); err != nil {
		return err
	}
	proc, err := c.start("containerd", "containerd", "--config", cfg, "--log-level", "warn")
	if err != nil {
		return err
	}
	return waitFor(ctx, proc, time.Minute, "containerd serving", func(ctx context.Context) error {
		_, err := c.ctr(ctx, "version")
		return err
	})
}

// ctr runs containerd's client against this cluster's containerd, in the
// namespace the CRI plugin uses.
func (c *Cluster) ctr(ctx context.Context, args ...string) (string, error) {
	args = append([]string{"--address", c.socket, "--namespace", "k8s.io"}, args...)
	out, err := exec.CommandContext(ctx, "ctr", args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("ctr %s: %w: %s", strings.Join(args[4:], " "), err, out)
	}
	return string(out), nil
}

func (c *Cluster) importImages(ctx context.Context) error {
	for _, img := range c.opts.Images {
		if _, err := c.ctr(ctx, "images", "import", img); err != nil {
			return err
		}
	}
	out, err := c.ctr(ctx, "images", "ls", "-q")
	c.logf("images in containerd:\n%s", out)
	return err
}

// startCoreDNS serves cluster DNS on the node's address, where the kubelet
// points the pods (clusterDNS). It runs on the host, not in a pod: it is the
// cluster's DNS, not a subject of these tests.
func (c *Cluster) startCoreDNS(ctx context.Context) error {
	kc, err := c.kubeconfigFor(c.pki, c.apiServer, "coredns", "sidelock-e2e-coredns", "system:masters")
	if err != nil {
		return err
	}
	ports, err := freePorts("127.0.0.1", 2)
	if err != nil {
		return err
	}
	health, ready := ports[0], ports[1]
	cf := filepath.Join(c.Dir, "coredns", "Corefile")
	if err := writeFile(cf, corefile(kc, health, ready)); err != nil {
		return err
	}
	proc, err := c.start("coredns", c.bin("coredns"), "-conf", cf)
	if err != nil {
		return err
	}
	url := "http://127.0.0.1:" + strconv.Itoa(ready) + "/ready"
	return waitFor(ctx, proc, time.Minute, "coredns ready", func(ctx context.Context) error {
		return httpOK(ctx, http.DefaultClient, url)
	})
}

// startKubelet starts the kubelet and waits for its node to be Ready (the
// runtime and its network up).
func (c *Cluster) startKubelet(ctx context.Context) error {
	kc, err := c.kubeconfigFor(c.pki, c.apiServer, "kubelet", "system:node:"+NodeName, "system:nodes")
	if err != nil {
		return err
	}
	serving, err := c.pki.issue("kubelet-serving", "system:node:"+NodeName, []string{"system:nodes"}, []string{nodeIP, NodeName})
	if err != nil {
		return err
	}
	port, err := freePort(nodeIP)
	if err != nil {
		return err
	}
	healthz, err := freePort("127.0.0.1")
	if err != nil {
		return err
	}
	// Names outside the cluster resolve to nothing: pods here need none.
	resolv := filepath.Join(c.Dir, "kubelet", "resolv.conf")
	if err := writeFile(resolv, "nameserver "+nodeIP+"\n"); err != nil {
		return err
	}
	cfg := filepath.Join(c.Dir, "kubelet", "config.yaml")
	if err := writeFile(cfg, kubeletConfig(c.pki.CAFile, c.socket, resolv, port, healthz, serving)); err != nil {
		return err
	}
	proc, err := c.start("kubelet", c.bin("kubelet"),
		"--config", cfg, "--kubeconfig", kc,
		"--root-dir", filepath.Join(c.Dir, "kubelet", "root"),
		"--cert-dir", filepath.Join(c.Dir, "kubelet", "pki"),
		"--hostname-override", NodeName, "--node-ip", nodeIP,
		"--v", "2")
	if err != nil {
		return err
	}
	return waitFor(ctx, proc, 3*time.Minute, "node Ready", func(ctx context.Context) error {
		n, err := c.Node(ctx)
		if err != nil {
			return err
		}
		if !nodeReady(n) {
			return errors.New("node not Ready")
		}
		return nil
	})
}

// startKubeProxy runs kube-proxy in iptables mode, so that ClusterIPs work
// from the host (the API server calling the injector's Service). Where it
// cannot run, the reason is kept in KubeProxy and the cluster goes on.
func (c *Cluster) startKubeProxy(ctx context.Context) error {
	kc, err := c.kubeconfigFor(c.pki, c.apiServer, "kube-proxy", "system:kube-proxy")
	if err != nil {
		return err
	}
	ports, err := freePorts("127.0.0.1", 2)
	if err != nil {
		return err
	}
	healthz, metrics := ports[0], ports[1]
	proc, err := c.start("kube-proxy", c.bin("kube-proxy"),
		"--kubeconfig", kc, "--hostname-override", NodeName,
		"--proxy-mode", "iptables", "--cluster-cidr", podCIDR,
		"--healthz-bind-address", "127.0.0.1:"+strconv.Itoa(healthz),
		"--metrics-bind-address", "127.0.0.1:"+strconv.Itoa(metrics),
		"--conntrack-max-per-core", "0")
	if err != nil {
		return err
	}
	err = waitFor(ctx, proc, time.Minute, "kube-proxy healthy", func(ctx context.Context) error {
		return httpOK(ctx, http.DefaultClient, "http://127.0.0.1:"+strconv.Itoa(healthz)+"/healthz")
	})
	if err != nil {
		c.KubeProxy = err.Error()
		c.logf("kube-proxy does not run: %v", err)
	}
	return nil
}

// Stop ends the pods through the CRI (their sandboxes, network namespaces
// and shims), then every process in reverse start order, then cleans the
// node's links, rules and mounts and removes the state.
func (c *Cluster) Stop() {
	byName := map[string]*process{}
	for _, p := range c.procs {
		byName[p.name] = p
	}
	if p := byName["kubelet"]; p != nil {
		p.stop(10 * time.Second)
	}
	if p := byName["containerd"]; p != nil {
		if done, _ := p.exited(); !done {
			c.removeSandboxes()
		}
	}
	for i := len(c.procs) - 1; i >= 0; i-- {
		c.procs[i].stop(10 * time.Second)
	}
	if c.Dir != "" {
		if pids := killByCmdline(c.Dir); len(pids) > 0 {
			c.logf("killed leftover processes %v", pids)
		}
	}
	if pids := killCgroups(); len(pids) > 0 {
		c.logf("killed leftover container processes %v", pids)
	}
	cleanNode(c.opts.BinDir, c.opts.Logf)
	if c.Dir != "" && os.Getenv("SIDELOCK_E2E_NODE_KEEP") == "" {
		unmountUnder(c.Dir)
		_ = os.RemoveAll(c.Dir)
	}
	if c.lock != nil {
		_ = c.lock.Close()
	}
}

// removeSandboxes stops and removes every pod sandbox, as `crictl rmp -fa`
// does, so that containerd tears down their networks and shims.
func (c *Cluster) removeSandboxes() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := grpc.NewClient("unix://"+c.socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		c.logf("CRI: %v", err)
		return
	}
	defer func() { _ = conn.Close() }()
	rt := runtimeapi.NewRuntimeServiceClient(conn)
	list, err := rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		c.logf("CRI: listing sandboxes: %v", err)
		return
	}
	for _, sb := range list.Items {
		if _, err := rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: sb.Id}); err != nil {
			c.logf("CRI: stopping sandbox %s: %v", sb.Metadata.GetName(), err)
		}
		if _, err := rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: sb.Id}); err != nil {
			c.logf("CRI: removing sandbox %s: %v", sb.Metadata.GetName(), err)
		}
	}
}

// cleanStale removes what a killed run left: its processes, mounts, state
// directories, links and rules.
func cleanStale(binDir string, logf func(string, ...any)) {
	if logf == nil {
		logf = func(string, ...any) {}
	}
	stale, _ := filepath.Glob(filepath.Join(os.TempDir(), dirPrefix+"*"))
	for _, dir := range stale {
		if pids := killByCmdline(dir); len(pids) > 0 {
			logf("killed processes %v of an earlier run in %s", pids, dir)
		}
	}
	// The shims' deaths leave their containers running: they are found by
	// their cgroups.
	if pids := killCgroups(); len(pids) > 0 {
		logf("killed the containers %v of an earlier run", pids)
	}
	for _, dir := range stale {
		unmountUnder(dir)
		_ = os.RemoveAll(dir)
	}
	cleanNode(binDir, logf)
}

// cleanNode removes the node's links and kube-proxy's rules.
func cleanNode(binDir string, logf func(string, ...any)) {
	for _, link := range []string{bridgeName} {
		if _, err := net.InterfaceByName(link); err == nil {
			if out, err := exec.Command("ip", "link", "delete", link).CombinedOutput(); err != nil && logf != nil {
				logf("ip link delete %s: %v: %s", link, err, out)
			}
		}
	}
	// What kube-proxy set up in iptables mode, undone by itself.
	if out, err := exec.Command(filepath.Join(binDir, "kube-proxy"), "--cleanup").CombinedOutput(); err != nil && logf != nil {
		logf("kube-proxy --cleanup: %v: %s", err, out)
	}
}

// unmountUnder lazily unmounts every mount point under dir, deepest first.
func unmountUnder(dir string) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return
	}
	var points []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && strings.HasPrefix(f[4], dir) {
			points = append(points, f[4])
		}
	}
	for i := len(points) - 1; i >= 0; i-- {
		_ = exec.Command("umount", "-l", points[i]).Run()
	}
}

// KillContainers sends SIGKILL to the containers' tasks, in order; one
// that already ended (the first one's death can end the next: containerd
// then answers "... not found") is skipped.
func (c *Cluster) KillContainers(ctx context.Context, ids ...string) error {
	for _, id := range ids {
		if out, err := c.ctr(ctx, "tasks", "kill", "--signal", "SIGKILL", id); err != nil && !strings.Contains(out, "not found") {
			return err
		}
	}
	return nil
}
