// Command etcd is a thin wrapper around etcd's own entry point. `go install
// go.etcd.io/etcd/server/v3` fails on the replace directives in etcd's go.mod, while a module of
// our own that requires the server package builds it from the Go module proxy unchanged.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
