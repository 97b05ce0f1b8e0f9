// Command etcd is etcd's server, built from its Go module so conformance runs need no download
// other than the Go module proxy.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
