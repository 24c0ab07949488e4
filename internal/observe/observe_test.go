package observe_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/proxops/proxops/internal/bus"
	"github.com/proxops/proxops/internal/bustest"
	"github.com/proxops/proxops/internal/inventory"
	"github.com/proxops/proxops/internal/observe"
	"github.com/proxops/proxops/internal/plan"
	"github.com/proxops/proxops/internal/wire"
)

// serve answers the observe requests of cluster lab's node with what answer returns.
func serve(t *testing.T, b *bus.Bus, node string, answer func(wire.ObserveRequest) wire.NodeInventory) {
	t.Helper()
	subject, err := bus.ObserveSubject("lab", node)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	_, err = b.Serve(ctx, subject, "executors", bus.ServeOptions{}, func(ctx context.Context, r *bus.Request) (proto.Message, error) {
		req, err := wire.DecodeObserveRequest(ctx, r.Decode)
		if err != nil {
			return nil, err
		}
		return wire.NodeInventoryToProto(answer(req))
	})
	if err != nil {
		t.Fatal(err)
	}
}

func request(node string) wire.ObserveRequest {
	return wire.ObserveRequest{Cluster: "lab", Node: node, RequestID: "obs-" + node}
}

func TestNodesReturnsTheAnswersInNodeOrderAndEachFailureByItsNode(t *testing.T) {
	env := bustest.Start(t)
	for _, n := range []string{"pve2", "pve1"} {
		serve(t, env.Bus, n, func(req wire.ObserveRequest) wire.NodeInventory {
			return wire.NodeInventory{Node: inventory.Node{Cluster: req.Cluster, Node: req.Node}, RequestID: req.RequestID}
		})
	}
	serve(t, env.Bus, "pve3", func(req wire.ObserveRequest) wire.NodeInventory {
		return wire.NodeInventory{Node: inventory.Node{Cluster: req.Cluster, Node: req.Node}, RequestID: req.RequestID,
			Error: "401 authentication failure", ErrorClass: string(plan.ErrorTerminal)}
	})
	c := observe.Client{Bus: env.Bus, Timeout: 10 * time.Second}
	nodes, failed := c.Nodes(context.Background(), []string{"pve3", "pve2", "pve4", "pve1"}, request)
	if len(nodes) != 2 || nodes[0].Node != "pve1" || nodes[1].Node != "pve2" {
		t.Errorf("nodes = %+v, want pve1 and pve2 in that order", nodes)
	}
	if err := failed["pve3"]; err == nil || err.Error() != "401 authentication failure" || !observe.Permanent(err) {
		t.Errorf("pve3: %v (permanent %v), want the executor's terminal answer", err, observe.Permanent(err))
	}
	if err := failed["pve4"]; err == nil || !strings.Contains(err.Error(), "no executor of node pve4 is running") ||
		observe.Permanent(err) {
		t.Errorf("pve4: %v, want a transient error naming the node no executor serves", err)
	}
	if len(failed) != 2 {
		t.Errorf("failures %v, want pve3 and pve4 only", failed)
	}
}

func TestAnAnswerForAnotherNodeIsRefused(t *testing.T) {
	env := bustest.Start(t)
	serve(t, env.Bus, "pve1", func(req wire.ObserveRequest) wire.NodeInventory {
		return wire.NodeInventory{Node: inventory.Node{Cluster: req.Cluster, Node: "pve9"}, RequestID: req.RequestID}
	})
	_, err := observe.Client{Bus: env.Bus, Timeout: 10 * time.Second}.Node(context.Background(), request("pve1"))
	if err == nil || err.Error() != "answer is for lab/pve9" {
		t.Fatalf("Node = %v, want the answer for another node refused", err)
	}
}
