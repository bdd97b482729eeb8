//go:build tools

// Package tools pins the upstream commands e2e/cluster/build.sh and e2e/realnode/build.sh compile, so
// `go mod tidy` keeps their dependencies in go.mod/go.sum; the kubelet comes from the same release.
package tools

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
