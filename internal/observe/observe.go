// Package observe asks a cluster's executors for their nodes' inventories over the bus: one request and
// reply per node, the nodes in parallel, each failure told apart by its node. The planner observes before it
// plans and the adopter before it writes manifests; both ask through a Client.
package observe

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"

	"github.com/proxops/proxops/internal/bus"
	"github.com/proxops/proxops/internal/inventory"
	"github.com/proxops/proxops/internal/plan"
	"github.com/proxops/proxops/internal/wire"
)

// Client sends observe requests on a bus.
type Client struct {
	Bus *bus.Bus
	// Timeout bounds one node's observe.
	Timeout time.Duration
}

// Failure is an executor's answer that it could not observe its node, or its refusal of the request:
// the message, and whether it is terminal (refused credentials, TLS verification, parameters, a request for
// a cluster, node or base-url it does not serve) rather than something that may go away by itself.
type Failure struct {
	Message  string
	Terminal bool
}

func (f *Failure) Error() string { return f.Message }

// Permanent reports whether an observe failure will not go away by itself. A node nothing answers for,
// a timeout and a failure the executor classified as retryable (PVE unreachable, 5xx, lock timeouts) are
// transient; an executor's terminal answer or a refusal of the request is not.
func Permanent(err error) bool {
	var f *Failure
	return errors.As(err, &f) && f.Terminal
}

// Node asks the executors of req.Node for its inventory within the client's timeout, and checks that the
// answer is for the node and cluster asked.
func (c Client) Node(ctx context.Context, req wire.ObserveRequest) (wire.NodeInventory, error) {
	cluster, node := req.Cluster, req.Node
	subject, err := bus.ObserveSubject(cluster, node)
	if err != nil {
		return wire.NodeInventory{}, err
	}
	octx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	m := wire.ObserveRequestToProto(req)
	inv, err := wire.DecodeNodeInventory(octx, func(ctx context.Context, into proto.Message) error {
		return c.Bus.Request(ctx, subject, m, into)
	})
	if err != nil {
		switch {
		case errors.Is(err, nats.ErrNoResponders):
			return wire.NodeInventory{}, fmt.Errorf("no executor of node %s is running (nothing answers on %s); "+
				"start one for cluster %s node %s, or see why it did not start", node, subject, cluster, node)
		case errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil:
			return wire.NodeInventory{}, fmt.Errorf("the executor of node %s did not answer within %s", node, c.Timeout)
		}
		var remote *bus.RemoteError
		if errors.As(err, &remote) {
			// The executor refused the request (another cluster or node, a base-url it does not serve).
			return wire.NodeInventory{}, &Failure{Message: remote.Message, Terminal: true}
		}
		return wire.NodeInventory{}, err
	}
	if inv.Error != "" {
		return wire.NodeInventory{}, &Failure{Message: inv.Error, Terminal: inv.ErrorClass == string(plan.ErrorTerminal)}
	}
	if inv.Node.Node != node || inv.Node.Cluster != cluster {
		return wire.NodeInventory{}, fmt.Errorf("answer is for %s/%s", inv.Node.Cluster, inv.Node.Node)
	}
	return inv, nil
}

// Nodes observes every node in parallel, each with the request ask returns for it. It returns the
// inventories of the nodes that answered, sorted by node, and the error of each node that did not.
func (c Client) Nodes(ctx context.Context, nodes []string, ask func(node string) wire.ObserveRequest) ([]inventory.Node, map[string]error) {
	var out []inventory.Node
	failed := map[string]error{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, n := range nodes {
		wg.Go(func() {
			inv, err := c.Node(ctx, ask(n))
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				failed[n] = err
				return
			}
			out = append(out, inv.Node)
		})
	}
	wg.Wait()
	slices.SortFunc(out, func(a, b inventory.Node) int { return strings.Compare(a.Node, b.Node) })
	return out, failed
}
