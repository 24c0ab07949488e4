package adopter

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/proxops/proxops/internal/adopt"
	"github.com/proxops/proxops/internal/bus"
	"github.com/proxops/proxops/internal/inventory"
	"github.com/proxops/proxops/internal/manifest"
	"github.com/proxops/proxops/internal/secrets"
	"github.com/proxops/proxops/internal/wire"
)

// Run reports gaps and serves adoption requests until ctx ends. Any number of adopters may run: they share
// the inventory consumer and the adoption queue group, and each publishes the same deterministic report.
func Run(ctx context.Context, cfg Config) error {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return err
	}
	log := cfg.Logger
	b, done, err := bus.ConnectUnlessGiven(ctx, cfg.Bus, cfg.NATS, "proxops-adopter", bus.Options{Logger: log})
	if err != nil {
		return err
	}
	defer done()
	a := &adopter{cfg: cfg, bus: b, log: log, decryptor: secrets.NewDecryptor(cfg.Keys),
		nodes: map[string]map[string]inventory.Node{}, published: map[string][]byte{}}
	return a.run(ctx)
}

type adopter struct {
	cfg       Config
	bus       *bus.Bus
	log       *slog.Logger
	decryptor *secrets.Decryptor

	// mu guards the latest inventory of every node, by cluster, and the last report published per cluster.
	mu        sync.Mutex
	nodes     map[string]map[string]inventory.Node
	published map[string][]byte
}

func (a *adopter) run(ctx context.Context) error {
	if err := a.bus.EnsureConsumer(ctx, bus.ConsumerConfig{Stream: bus.StreamInventory, Durable: bus.ConsumerAdopterInventory,
		Filter: bus.FilterInventory, AckWait: 30 * time.Second, Description: "adopters: node inventories"}); err != nil {
		return err
	}
	if err := a.seed(ctx); err != nil {
		return err
	}
	svc, err := a.bus.Serve(ctx, bus.FilterAdopt, bus.QueueAdopters,
		bus.ServeOptions{Concurrency: 2, Timeout: a.cfg.ObserveTimeout + time.Minute}, a.handleAdopt)
	if err != nil {
		return err
	}
	defer svc.Stop()
	a.log.Info("adopter ready")
	err = a.bus.Consume(ctx, bus.StreamInventory, bus.ConsumerAdopterInventory,
		bus.ConsumeOptions{Concurrency: 1, MaxWait: 2 * time.Second, RetryDelay: 2 * time.Second}, a.handleInventory)
	a.log.Info("adopter stopped")
	return err
}

// seed loads the latest inventory of every node (a restarted adopter knows the whole cluster at once) and
// reports every cluster.
func (a *adopter) seed(ctx context.Context) error {
	msgs, err := a.bus.LastPerSubject(ctx, bus.StreamInventory, bus.FilterInventory)
	if err != nil {
		return fmt.Errorf("read the latest inventories: %w", err)
	}
	var clusters []string
	for _, m := range msgs {
		inv, err := wire.DecodeNodeInventory(ctx, m.Decode)
		if err != nil {
			a.log.Warn("undecodable inventory ignored", "subject", m.Subject, "err", err)
			continue
		}
		if a.remember(inv) {
			clusters = append(clusters, inv.Node.Cluster)
		}
	}
	slices.Sort(clusters)
	for _, c := range slices.Compact(clusters) {
		if err := a.report(ctx, c); err != nil {
			return err
		}
	}
	return nil
}

// remember keeps a node's inventory unless the observation failed; it reports whether it did.
func (a *adopter) remember(inv wire.NodeInventory) bool {
	if inv.Error != "" || bus.ValidateCluster(inv.Node.Cluster) != nil || bus.ValidateNode(inv.Node.Node) != nil {
		return false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.nodes[inv.Node.Cluster] == nil {
		a.nodes[inv.Node.Cluster] = map[string]inventory.Node{}
	}
	a.nodes[inv.Node.Cluster][inv.Node.Node] = inv.Node
	return true
}

func (a *adopter) handleInventory(ctx context.Context, d *bus.Delivery) error {
	inv, err := wire.DecodeNodeInventory(ctx, d.Decode)
	if err != nil {
		a.log.Error("undecodable inventory", "subject", d.Subject(), "err", err)
		return bus.Terminal(err)
	}
	if !a.remember(inv) {
		return nil
	}
	return a.report(ctx, inv.Node.Cluster)
}

// report publishes a cluster's gap report when it differs from the last one published.
func (a *adopter) report(ctx context.Context, cluster string) error {
	managed, err := a.managed(ctx, cluster)
	if err != nil {
		return err
	}
	a.mu.Lock()
	c := inventory.Cluster{Name: cluster}
	for _, n := range a.nodes[cluster] {
		c.Nodes = append(c.Nodes, n)
	}
	a.mu.Unlock()
	rep := adopt.Gaps(c, managed)
	m := wire.GapReportToProto(rep)
	data, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		return fmt.Errorf("gap report of %s: %w", cluster, err)
	}
	subject, err := bus.GapSubject(cluster)
	if err != nil {
		return err
	}
	a.mu.Lock()
	last, known := a.published[cluster]
	a.mu.Unlock()
	if !known {
		// After a restart, the report already on the stream counts as published.
		last = a.lastPublished(ctx, subject)
	}
	if bytes.Equal(last, data) {
		a.mu.Lock()
		a.published[cluster] = data
		a.mu.Unlock()
		return nil
	}
	if _, err := a.bus.Publish(ctx, subject, m); err != nil {
		return fmt.Errorf("publish the gap report of %s: %w", cluster, err)
	}
	a.mu.Lock()
	a.published[cluster] = data
	a.mu.Unlock()
	a.log.Info("gap report published", "cluster", cluster, "gaps", len(rep.Gaps))
	return nil
}

// lastPublished returns the report stored on a gap subject in its deterministic encoding, or nil.
func (a *adopter) lastPublished(ctx context.Context, subject string) []byte {
	m, err := a.bus.LastMessage(ctx, bus.StreamGaps, subject)
	if err != nil {
		return nil
	}
	rep, err := wire.DecodeGapReport(ctx, m.Decode)
	if err != nil {
		return nil
	}
	data, err := proto.MarshalOptions{Deterministic: true}.Marshal(wire.GapReportToProto(rep))
	if err != nil {
		return nil
	}
	return data
}

// managed reads the ownership inventory of a cluster: vmid → the Kind/name the guest was recorded as.
func (a *adopter) managed(ctx context.Context, cluster string) (map[int]manifest.Ref, error) {
	entries, err := a.bus.Entries(ctx, bus.BucketOwned, cluster+".*")
	if err != nil && !errors.Is(err, bus.ErrNotFound) {
		return nil, fmt.Errorf("read the ownership inventory of %s: %w", cluster, err)
	}
	out := map[int]manifest.Ref{}
	for _, e := range entries {
		o, err := wire.UnmarshalOwnedGuest(e.Value)
		if err != nil {
			a.log.Warn("unreadable ownership record ignored", "cluster", cluster, "key", e.Key, "err", err)
			continue
		}
		if ref, ok := manifest.ParseRef(o.Ref); ok {
			out[o.VMID] = ref
		}
	}
	return out, nil
}
