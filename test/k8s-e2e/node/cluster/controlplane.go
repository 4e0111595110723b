package cluster

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"
	"time"

	"k8s.io/client-go/kubernetes"
)

// startControlPlane starts etcd, the API server, the controller manager and
// the scheduler, and waits for the API server to be ready.
func (c *Cluster) startControlPlane(ctx context.Context) error {
	p, err := newPKI(filepath.Join(c.Dir, "pki"))
	if err != nil {
		return err
	}
	c.pki = p
	etcdURL, err := c.startEtcd(ctx)
	if err != nil {
		return err
	}
	if err := c.startAPIServer(ctx, etcdURL); err != nil {
		return err
	}
	if err := c.startControllerManager(); err != nil {
		return err
	}
	return c.startScheduler()
}

func (c *Cluster) startEtcd(ctx context.Context) (string, error) {
	ports, err := freePorts("127.0.0.1", 2)
	if err != nil {
		return "", err
	}
	clientPort, peerPort := ports[0], ports[1]
	url := "http://127.0.0.1:" + strconv.Itoa(clientPort)
	proc, err := c.start("etcd", c.bin("etcd"),
		"--data-dir", filepath.Join(c.Dir, "etcd"),
		"--listen-client-urls", url, "--advertise-client-urls", url,
		"--listen-peer-urls", "http://127.0.0.1:"+strconv.Itoa(peerPort),
		"--initial-advertise-peer-urls", "http://127.0.0.1:"+strconv.Itoa(peerPort),
		"--initial-cluster", "default=http://127.0.0.1:"+strconv.Itoa(peerPort),
		"--unsafe-no-fsync", "--log-level", "warn")
	if err != nil {
		return "", err
	}
	return url, waitFor(ctx, proc, time.Minute, "etcd healthy", func(ctx context.Context) error {
		return httpOK(ctx, http.DefaultClient, url+"/health")
	})
}

func (c *Cluster) startAPIServer(ctx context.Context, etcdURL string) error {
	port, err := freePort("127.0.0.1")
	if err != nil {
		return err
	}
	c.apiServer = "https://127.0.0.1:" + strconv.Itoa(port)
	serving, err := c.pki.issue("apiserver", "kube-apiserver", nil, []string{
		"127.0.0.1", nodeIP, apiServiceIP, "localhost", "kubernetes", "kubernetes.default",
		"kubernetes.default.svc", "kubernetes.default.svc." + clusterDomain})
	if err != nil {
		return err
	}
	// The API server's client certificate to the kubelet (logs, exec).
	kubeletClient, err := c.pki.issue("apiserver-kubelet-client", "kube-apiserver-kubelet-client", []string{"system:masters"}, nil)
	if err != nil {
		return err
	}
	if c.saKey, err = c.pki.serviceAccountKey(); err != nil {
		return err
	}
	if c.Kubeconfig, err = c.kubeconfigFor(c.pki, c.apiServer, "admin", "sidelock-e2e-admin", "system:masters"); err != nil {
		return err
	}
	proc, err := c.start("kube-apiserver", c.bin("kube-apiserver"),
		"--etcd-servers", etcdURL,
		"--bind-address", "127.0.0.1", "--secure-port", strconv.Itoa(port),
		"--advertise-address", nodeIP,
		"--service-cluster-ip-range", serviceCIDR,
		"--authorization-mode", "Node,RBAC",
		"--enable-admission-plugins", "NodeRestriction",
		"--client-ca-file", c.pki.CAFile,
		"--tls-cert-file", serving.Cert, "--tls-private-key-file", serving.Key,
		"--kubelet-client-certificate", kubeletClient.Cert, "--kubelet-client-key", kubeletClient.Key,
		"--kubelet-preferred-address-types", "InternalIP",
		"--service-account-issuer", "https://kubernetes.default.svc."+clusterDomain,
		"--service-account-key-file", c.saKey, "--service-account-signing-key-file", c.saKey,
		"--allow-privileged=false",
		"--cert-dir", filepath.Join(c.Dir, "apiserver-certs"))
	if err != nil {
		return err
	}
	if c.Config, err = restConfig(c.Kubeconfig); err != nil {
		return err
	}
	if c.Client, err = kubernetes.NewForConfig(c.Config); err != nil {
		return err
	}
	return waitFor(ctx, proc, 2*time.Minute, "kube-apiserver ready", func(ctx context.Context) error {
		body, err := c.Client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		if err != nil {
			return fmt.Errorf("%w: %s", err, body)
		}
		return nil
	})
}

func (c *Cluster) startControllerManager() error {
	return c.startController("kube-controller-manager", "system:kube-controller-manager",
		"--use-service-account-credentials",
		"--service-account-private-key-file", c.saKey, "--root-ca-file", c.pki.CAFile,
		"--service-cluster-ip-range", serviceCIDR, "--controllers", "*")
}

func (c *Cluster) startScheduler() error {
	return c.startController("kube-scheduler", "system:kube-scheduler")
}

// startController starts the controller manager or the scheduler: a client
// of the API server as user, with its own secure port on loopback and no
// leader election (one of each).
func (c *Cluster) startController(name, user string, args ...string) error {
	kc, err := c.kubeconfigFor(c.pki, c.apiServer, name, user)
	if err != nil {
		return err
	}
	port, err := freePort("127.0.0.1")
	if err != nil {
		return err
	}
	_, err = c.start(name, c.bin(name), append([]string{
		"--kubeconfig", kc, "--authentication-kubeconfig", kc, "--authorization-kubeconfig", kc,
		"--bind-address", "127.0.0.1", "--secure-port", strconv.Itoa(port),
		"--leader-elect=false", "--cert-dir", filepath.Join(c.Dir, name+"-certs")}, args...)...)
	return err
}

func httpOK(ctx context.Context, client *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	return nil
}
