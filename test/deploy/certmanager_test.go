package deploy

import (
	"encoding/json"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// cert-manager's Issuer and Certificate (cert-manager.io/v1), reduced to
// the fields of its API that the chart may use, with their API names, so
// that they decode as strictly as the built-in kinds (the cert-manager
// module itself is far too heavy for this). A field the chart renders
// that is not here fails the test: add it only after checking it in
// cert-manager's API reference.

type cmIssuer struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		SelfSigned *struct {
			CRLDistributionPoints []string `json:"crlDistributionPoints,omitempty"`
		} `json:"selfSigned,omitempty"`
		CA *struct {
			SecretName            string   `json:"secretName"`
			CRLDistributionPoints []string `json:"crlDistributionPoints,omitempty"`
			OCSPServers           []string `json:"ocspServers,omitempty"`
		} `json:"ca,omitempty"`
	} `json:"spec"`
}

type cmObjectReference struct {
	Name  string `json:"name"`
	Kind  string `json:"kind,omitempty"`
	Group string `json:"group,omitempty"`
}

type cmCertificate struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		CommonName  string           `json:"commonName,omitempty"`
		DNSNames    []string         `json:"dnsNames,omitempty"`
		Duration    *metav1.Duration `json:"duration,omitempty"`
		RenewBefore *metav1.Duration `json:"renewBefore,omitempty"`
		SecretName  string           `json:"secretName"`
		IsCA        bool             `json:"isCA,omitempty"`
		Usages      []string         `json:"usages,omitempty"`
		PrivateKey  *struct {
			RotationPolicy string `json:"rotationPolicy,omitempty"`
			Encoding       string `json:"encoding,omitempty"`
			Algorithm      string `json:"algorithm,omitempty"`
			Size           int    `json:"size,omitempty"`
		} `json:"privateKey,omitempty"`
		IssuerRef cmObjectReference `json:"issuerRef"`
	} `json:"spec"`
}

func (i *cmIssuer) DeepCopyObject() runtime.Object      { return deepCopyJSON(i, &cmIssuer{}) }
func (c *cmCertificate) DeepCopyObject() runtime.Object { return deepCopyJSON(c, &cmCertificate{}) }

func deepCopyJSON[T runtime.Object](from, to T) runtime.Object {
	b, err := json.Marshal(from)
	if err != nil {
		panic(err)
	}
	if err := json.Unmarshal(b, to); err != nil {
		panic(err)
	}
	return to
}

// extraKinds are the kinds outside client-go's scheme that manifests may use.
var extraKinds = map[schema.GroupVersionKind]func() runtime.Object{
	{Group: "cert-manager.io", Version: "v1", Kind: "Issuer"}:      func() runtime.Object { return &cmIssuer{} },
	{Group: "cert-manager.io", Version: "v1", Kind: "Certificate"}: func() runtime.Object { return &cmCertificate{} },
	// The Prometheus Operator's (monitoring_test.go).
	{Group: "monitoring.coreos.com", Version: "v1", Kind: "PodMonitor"}:     func() runtime.Object { return &pmPodMonitor{} },
	{Group: "monitoring.coreos.com", Version: "v1", Kind: "PrometheusRule"}: func() runtime.Object { return &pmPrometheusRule{} },
}
