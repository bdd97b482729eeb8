//go:build tools

// Package tools pins the kubelet, so `go mod tidy` keeps its dependencies in go.mod/go.sum. This module starts
// from e2e/cluster/go.mod (the same k8s.io/kubernetes version and staging replaces, the same dependency
// versions), so the kubelet matches the control plane; e2e/realnode/build.sh refuses to build when the two
// require different k8s.io/kubernetes versions.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kubelet"
)
