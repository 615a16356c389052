// Command etcd is upstream etcd's server main, built from its published module
// (go.etcd.io/etcd/server/v3 cannot be `go install`ed: its go.mod has replace lines).
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
