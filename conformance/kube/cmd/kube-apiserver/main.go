// Command kube-apiserver is the upstream kube-apiserver, built from k8s.io/kubernetes at the
// version pinned in go.mod, so the conformance suites compare against the real thing.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

func main() {
	command := app.NewAPIServerCommand()
	code := cli.Run(command)
	os.Exit(code)
}
