//go:build tools

// Package k8s names the Kubernetes commands the Makefile builds from this
// module (make kube-apiserver), so that go mod tidy keeps their
// dependencies.
package k8s

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
