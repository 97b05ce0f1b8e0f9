// Command kubectl is the upstream kubectl, built from the Kubernetes module at the version
// pinned in go.mod (Debian's kubernetes-client is far older): the deploy manifests are applied
// with it (`kubectl apply -k … --dry-run=server`), and it is the client the fidelity suites
// can drive against both API servers. Its main is k8s.io/kubernetes/cmd/kubectl's.
package main

import (
	"k8s.io/component-base/cli"
	"k8s.io/kubectl/pkg/cmd"
	"k8s.io/kubectl/pkg/cmd/util"
)

func main() {
	command := cmd.NewDefaultKubectlCommand()
	if err := cli.RunNoErrOutput(command); err != nil {
		// Pretty-print the error and exit with an error.
		util.CheckErr(err)
	}
}
