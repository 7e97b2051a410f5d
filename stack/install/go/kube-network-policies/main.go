// Command kube-network-policies runs sigs.k8s.io/kube-network-policies' NetworkPolicy controller
// on the local node as a host process, the way the stack runs kube-proxy. Its own command
// (cmd/main.go) only runs in a pod: it reads the in-cluster service-account files. This one:
//   - reads a kubeconfig (-kubeconfig), like kube-proxy;
//   - disables NRI: the node's containerd has none, and no socket of ours lives at NRI's fixed
//     path (pod addresses come from the API server instead);
//   - stops on SIGTERM as well as SIGINT, and waits for the controller to delete its nftables
//     table: the queue rule drops what no one answers (fail closed), so a table left behind
//     would cut off every pod a policy selects;
//   - with -cleanup, only deletes that table (for a run that was killed) and exits.
//
// Only NetworkPolicy is enforced (no AdminNetworkPolicy). The controller package is built from
// the Go module proxy with stack/install/go/kube-network-policies/xt-nfqueue.patch applied.
package main

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/google/nftables"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/component-base/logs"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/klog/v2"
	"sigs.k8s.io/kube-network-policies/pkg/networkpolicy"
)

const tableName = "kube-network-policies" // the controller's default (Config.Defaults)

func main() { os.Exit(run()) }

func run() int {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of the cluster (required)")
	nodeName := flag.String("hostname-override", "", "this node's name (required)")
	metrics := flag.String("metrics-bind-address", "127.0.0.1:9080", "address of /metrics")
	queueID := flag.Int("nfqueue-id", 100, "the nfqueue the packets go to")
	failOpen := flag.Bool("fail-open", false, "accept packets while the controller does not run")
	cleanup := flag.Bool("cleanup", false, "delete the nftables table and exit")
	c := logsapi.NewLoggingConfiguration()
	logsapi.AddGoFlags(c, flag.CommandLine)
	flag.Parse()
	logs.InitLogs()
	if err := logsapi.ValidateAndApply(c, nil); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	if *cleanup {
		return deleteTable()
	}
	if *kubeconfig == "" || *nodeName == "" {
		fmt.Fprintln(os.Stderr, "-kubeconfig and -hostname-override are required")
		return 2
	}
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer cancel()

	config, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		klog.ErrorS(err, "reading the kubeconfig")
		return 1
	}
	clientset, err := kubernetes.NewForConfig(config)
	if err != nil {
		klog.ErrorS(err, "creating the client")
		return 1
	}
	factory := informers.NewSharedInformerFactory(clientset, 0)
	controller, err := networkpolicy.NewController(
		clientset,
		factory.Networking().V1().NetworkPolicies(),
		factory.Core().V1().Namespaces(),
		factory.Core().V1().Pods(),
		nil, nil, nil, nil, // no AdminNetworkPolicy: nodes and the policy API are not needed
		networkpolicy.Config{
			FailOpen:            *failOpen,
			QueueID:             *queueID,
			NodeName:            *nodeName,
			NetfilterBug1766Fix: true,
			NFTableName:         tableName,
			NRIdisabled:         true,
		},
	)
	if err != nil {
		klog.ErrorS(err, "creating the controller")
		return 1
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.Handler())
	server := &http.Server{Addr: *metrics, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := server.ListenAndServe(); err != nil && err != http.ErrServerClosed {
			klog.ErrorS(err, "serving metrics")
		}
	}()
	done := make(chan error, 1)
	go func() { done <- controller.Run(ctx) }()
	factory.Start(ctx.Done())
	select {
	case err = <-done:
		if ctx.Err() == nil { // it stopped on its own (it could not open the queue)
			klog.ErrorS(err, "the controller stopped")
			return 1
		}
		_ = server.Close()
		return 0
	case <-ctx.Done():
	}
	_ = server.Close()
	select { // Run deletes the table on its way out
	case <-done:
	case <-time.After(8 * time.Second):
		klog.Info("the controller did not stop within 8s: deleting its table")
		return deleteTable()
	}
	return 0
}

func deleteTable() int {
	nft, err := nftables.New()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	tables, err := nft.ListTablesOfFamily(nftables.TableFamilyINet)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	for _, t := range tables {
		if t.Name == tableName {
			nft.DelTable(t)
			if err := nft.Flush(); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
		}
	}
	return 0
}
