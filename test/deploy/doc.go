// Package deploy holds the tests of sidelock's deployment artifacts: the
// Dockerfile, the Helm chart (charts/sidelock), the plain manifests (k8s/)
// and skaffold.yaml. It is a module of its own so that the Helm and
// Kubernetes libraries stay out of the root module; the tests only read files
// of the repository, they never build the image or talk to a cluster.
package deploy
