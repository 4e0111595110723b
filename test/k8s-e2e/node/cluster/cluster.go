// Package cluster runs a single-node Kubernetes cluster on this machine from
// real components: etcd, kube-apiserver, kube-controller-manager,
// kube-scheduler, kube-proxy and CoreDNS built from the Go module proxy
// (test/k8s-e2e/tools/build.sh node), and a kubelet driving Debian's
// containerd and runc, with pods on a CNI bridge. Images come from tar
// archives imported into containerd: there is no registry.
//
// Every process is a child of the test and is stopped by PID at Stop, with
// the shims containerd left, the pods' mounts, network namespaces, links and
// kube-proxy's rules; a run that was killed is cleaned up by the next Start.
//
// What it is not: one node, so nothing about scheduling across nodes,
// anti-affinity, drains or a network between nodes is exercised; all
// components share one certificate authority; the node is a cgroup v1 host,
// which the kubelet runs on only with failCgroupV1: false.
package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// NodeName is the name the kubelet registers.
const NodeName = "sidelock-e2e-node"

// dirPrefix names every run's state directory, so that the next Start finds
// what a killed run left behind.
const dirPrefix = "sidelock-e2e-node-"

// Options say where the binaries are and what to load.
type Options struct {
	// BinDir holds etcd, kube-apiserver, kube-controller-manager,
	// kube-scheduler, kubelet, kube-proxy and coredns.
	BinDir string
	// Images are tar archives for `ctr images import`; Pause is the
	// reference of the pod sandbox image among them.
	Images []string
	Pause  string
	Logf   func(format string, args ...any)
}

// Cluster is a running single-node cluster.
type Cluster struct {
	Dir        string
	Kubeconfig string // admin (system:masters)
	Config     *rest.Config
	Client     *kubernetes.Clientset
	NodeIP     string
	// KubeProxy is empty when kube-proxy runs, else why it does not.
	KubeProxy string

	opts      Options
	pki       *pki
	apiServer string
	saKey     string
	socket    string
	lock      *os.File
	procs     []*process // in start order
	timesLog  []string
	startedAt time.Time
}

// Start brings the cluster up and waits for the node to be Ready.
func Start(ctx context.Context, opts Options) (c *Cluster, err error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("the kubelet and containerd need root")
	}
	if err := checkTools(opts.BinDir); err != nil {
		return nil, err
	}
	// One node per machine: its bridge, address and port 53 are fixed, and
	// cleaning up after a killed run must not kill a live one.
	lock, err := lockMachine()
	if err != nil {
		return nil, err
	}
	cleanStale(opts.BinDir, opts.Logf)
	dir, err := os.MkdirTemp("", dirPrefix+"*")
	if err != nil {
		_ = lock.Close()
		return nil, err
	}
	c = &Cluster{Dir: dir, NodeIP: nodeIP, opts: opts, lock: lock, socket: filepath.Join(dir, "containerd", "containerd.sock"), startedAt: time.Now()}
	defer func() {
		if err != nil {
			c.Stop()
			c = nil
		}
	}()
	steps := []struct {
		name string
		run  func(context.Context) error
	}{
		{"host", c.setUpHost},
		{"control plane", c.startControlPlane},
		{"containerd", c.startContainerd},
		{"images", c.importImages},
		{"coredns", c.startCoreDNS},
		{"kubelet", c.startKubelet},
		{"kube-proxy", c.startKubeProxy},
	}
	for _, s := range steps {
		began := time.Now()
		if err := s.run(ctx); err != nil {
			return c, fmt.Errorf("%s: %w", s.name, err)
		}
		c.timesLog = append(c.timesLog, fmt.Sprintf("%s %v", s.name, time.Since(began).Round(time.Millisecond)))
	}
	c.logf("cluster up in %v (%s); state in %s", time.Since(c.startedAt).Round(time.Millisecond), strings.Join(c.timesLog, ", "), dir)
	return c, nil
}

func (c *Cluster) logf(format string, args ...any) {
	if c.opts.Logf != nil {
		c.opts.Logf(format, args...)
	}
}

func (c *Cluster) bin(name string) string { return filepath.Join(c.opts.BinDir, name) }

func checkTools(binDir string) error {
	var missing []string
	for _, b := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kube-proxy", "coredns"} {
		if _, err := os.Stat(filepath.Join(binDir, b)); err != nil {
			missing = append(missing, filepath.Join(binDir, b)+" (test/k8s-e2e/tools/build.sh node)")
		}
	}
	for _, b := range []string{"containerd", "ctr", "/usr/sbin/runc", "/usr/lib/cni/bridge", "/usr/lib/cni/host-local", "/usr/lib/cni/loopback", "ip", "iptables"} {
		if _, err := exec.LookPath(b); err != nil {
			missing = append(missing, b+" (apt-get install containerd runc containernetworking-plugins iproute2 iptables)")
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("missing: %s", strings.Join(missing, "; "))
	}
	return nil
}

// setUpHost makes the pods' cgroup root, and their bridge with the node's
// address on it before the kubelet binds that address (the CNI plugin then
// finds it made).
func (c *Cluster) setUpHost(ctx context.Context) error {
	if err := makeCgroupRoot(); err != nil {
		return err
	}
	for _, args := range [][]string{
		{"link", "add", bridgeName, "type", "bridge"},
		{"addr", "add", nodeIP + "/24", "dev", bridgeName},
		{"link", "set", bridgeName, "up"},
	} {
		if out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, out)
		}
	}
	return nil
}

func (c *Cluster) start(name, bin string, args ...string) (*process, error) {
	logs := filepath.Join(c.Dir, "logs")
	if err := os.MkdirAll(logs, 0o755); err != nil {
		return nil, err
	}
	p, err := startProcess(logs, name, bin, args...)
	if err != nil {
		return nil, err
	}
	c.procs = append(c.procs, p)
	return p, nil
}

// waitFor polls ready until it answers nil, p exits or the timeout passes.
func waitFor(ctx context.Context, p *process, timeout time.Duration, what string, ready func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	for {
		if last = ready(ctx); last == nil {
			return nil
		}
		if p != nil {
			if done, err := p.exited(); done {
				return fmt.Errorf("%s exited (%w) before %s:\n%s", p.name, err, what, p.tail(30))
			}
		}
		select {
		case <-ctx.Done():
			tail := ""
			if p != nil {
				tail = "\n" + p.tail(30)
			}
			return fmt.Errorf("%s not within %v: %w%s", what, timeout, last, tail)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// freePorts are n distinct ports free on addr now (all listened on at once,
// so none is handed out twice); components bind them soon after.
func freePorts(addr string, n int) ([]int, error) {
	var ports []int
	for range n {
		l, err := net.Listen("tcp", net.JoinHostPort(addr, "0"))
		if err != nil {
			return nil, err
		}
		defer func() { _ = l.Close() }()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// freePort is one port free on addr now.
func freePort(addr string) (int, error) {
	ports, err := freePorts(addr, 1)
	if err != nil {
		return 0, err
	}
	return ports[0], nil
}

// Node is the node object as the API server has it.
func (c *Cluster) Node(ctx context.Context) (*corev1.Node, error) {
	return c.Client.CoreV1().Nodes().Get(ctx, NodeName, metav1.GetOptions{})
}

func nodeReady(n *corev1.Node) bool {
	for _, cond := range n.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			return cond.Status == corev1.ConditionTrue
		}
	}
	return false
}

// kubeconfigFor writes a kubeconfig for a client certificate of user cn.
func (c *Cluster) kubeconfigFor(p *pki, server, name, cn string, orgs ...string) (string, error) {
	kp, err := p.issue(name, cn, orgs, nil)
	if err != nil {
		return "", err
	}
	path := filepath.Join(c.Dir, "kubeconfig", name)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return "", err
	}
	return path, writeKubeconfig(path, server, p.CAFile, kp)
}

func restConfig(kubeconfig string) (*rest.Config, error) {
	return clientcmd.BuildConfigFromFlags("", kubeconfig)
}

// lockMachine takes the machine-wide lock of this package's clusters; it
// is released when the file is closed (at Stop, or when the process dies).
func lockMachine() (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(os.TempDir(), "sidelock-e2e-node.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("another e2e-node cluster runs on this machine (%s is locked): %w", f.Name(), err)
	}
	return f, nil
}
