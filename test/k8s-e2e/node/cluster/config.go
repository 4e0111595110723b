package cluster

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Addresses of the node's networks. They are local to this machine: the
// pods sit on a bridge whose gateway address is the node's address (this
// kernel has no dummy interfaces), so no cluster traffic leaves through a
// real interface.
const (
	nodeIP      = "10.244.0.1"
	podCIDR     = "10.244.0.0/24"
	serviceCIDR = "10.96.0.0/16"
	// apiServiceIP is the first address of serviceCIDR: the kubernetes Service.
	apiServiceIP = "10.96.0.1"
	bridgeName   = "sle2e0"
	// cgroupRoot holds every pod's cgroups (in each cgroup v1 hierarchy),
	// apart from any other kubelet's, so that they can be found and killed.
	cgroupRoot    = "sidelock-e2e-node"
	clusterDomain = "cluster.local"
)

// containerdConfig is containerd 1.6's configuration (version 2) with the
// CRI plugin, rooted under dir, with the pause image given.
func containerdConfig(dir, socket, pauseRef string) string {
	return fmt.Sprintf(`version = 2
root = %q
state = %q
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]
[grpc]
  address = %q
[plugins."io.containerd.internal.v1.opt"]
  path = %q
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %q
  enable_selinux = false
  # This machine's root lacks CAP_SYS_RESOURCE, so runc cannot lower a
  # process's oom_score_adj (the sandbox's -998 makes runc init fail);
  # containerd clamps it to its own, as it does for rootless setups.
  restrict_oom_score_adj = true
  # The pods' network namespaces under the state directory, not
  # /var/run/netns: a killed run's are found and removed with it.
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "/usr/sbin/runc"
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = %q
`, filepath.Join(dir, "root"), filepath.Join(dir, "state"), socket, filepath.Join(dir, "opt"), pauseRef, filepath.Join(dir, "net.d"))
}

// cniConfig is a bridge network with host-local addresses for the pods.
func cniConfig(ipamDir string) string {
	return fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": "sidelock-e2e",
  "plugins": [{
    "type": "bridge",
    "bridge": %q,
    "isGateway": true,
    "ipMasq": false,
    "hairpinMode": true,
    "ipam": {
      "type": "host-local",
      "dataDir": %q,
      "ranges": [[{"subnet": %q}]],
      "routes": [{"dst": "0.0.0.0/0"}]
    }
  }]
}
`, bridgeName, ipamDir, podCIDR)
}

// kubeletConfig is the KubeletConfiguration of the node. failCgroupV1 is
// false because this machine mounts cgroup v1 only (the kubelet refuses it
// by default since 1.35). Eviction and image garbage collection are off:
// the test must not lose pods to a disk that happens to be full.
func kubeletConfig(caFile, socket, resolvConf string, port, healthzPort int, servingCert keyPair) string {
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: /%s
containerRuntimeEndpoint: unix://%s
address: %s
port: %d
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: %d
tlsCertFile: %s
tlsPrivateKeyFile: %s
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: %s}
authorization: {mode: Webhook}
clusterDNS: [%s]
clusterDomain: %s
resolvConf: %s
failSwapOn: false
evictionHard: {"memory.available": "0%%", "nodefs.available": "0%%", "imagefs.available": "0%%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
syncFrequency: 5s
fileCheckFrequency: 5s
nodeStatusUpdateFrequency: 2s
shutdownGracePeriod: 0s
`, cgroupRoot, socket, nodeIP, port, healthzPort, servingCert.Cert, servingCert.Key, caFile, nodeIP, clusterDomain, resolvConf)
}

// corefile serves the cluster domain from the API server on the node's
// address; anything else is refused (pods here need no outside names).
func corefile(kubeconfig string, healthPort, readyPort int) string {
	return fmt.Sprintf(`.:53 {
    bind %s
    errors
    health 127.0.0.1:%d
    ready 127.0.0.1:%d
    kubernetes %s in-addr.arpa ip6.arpa {
        kubeconfig %s
        pods insecure
        ttl 5
    }
    cache 5
}
`, nodeIP, healthPort, readyPort, clusterDomain, kubeconfig)
}

// kubeconfig writes a kubeconfig for a client certificate to path.
func writeKubeconfig(path, server, caFile string, kp keyPair) error {
	content := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: e2e
  cluster: {server: %q, certificate-authority: %q}
users:
- name: e2e
  user: {client-certificate: %q, client-key: %q}
contexts:
- name: e2e
  context: {cluster: e2e, user: e2e}
current-context: e2e
`, server, caFile, kp.Cert, kp.Key)
	return os.WriteFile(path, []byte(content), 0o600)
}

func writeFile(path, content string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(strings.TrimLeft(content, "\n")), 0o644)
}
