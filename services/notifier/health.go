package notifier

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/proxops/proxops/internal/bus"
	"github.com/proxops/proxops/internal/report"
	"github.com/proxops/proxops/internal/wire"
)

// A cluster's delivery health is the outcome of each provider's last delivery about it. The notifier keeps it
// in proxops_notify (key <cluster>.deliveries) and publishes it on proxops.v1.notify.<cluster> whenever a
// provider turns failing or recovers, so the status service shows a failing provider beside the cluster
// whose news it could not tell.

func deliveriesKey(cluster string) string { return cluster + ".deliveries" }

// recordDelivery notes the outcome of one delivery (err nil: it was taken) and publishes the cluster's
// delivery health when the provider's state changed. Failing to record is logged: the delivery itself stands.
func (n *notifier) recordDelivery(ctx context.Context, p *provider, note Notification, sendErr error) {
	if err := n.updateHealth(ctx, p, note, sendErr); err != nil && ctx.Err() == nil {
		n.log.Warn("delivery health not recorded", "provider", p.cfg.Name, "cluster", note.Cluster, "err", err)
	}
}

func (n *notifier) updateHealth(ctx context.Context, p *provider, note Notification, sendErr error) error {
	n.healthMu.Lock()
	defer n.healthMu.Unlock()
	var providers []report.NotificationDelivery
	if err := n.recall(ctx, deliveriesKey(note.Cluster), &providers); err != nil {
		return fmt.Errorf("delivery health of %s: %w", note.Cluster, err)
	}
	now := report.NotificationDelivery{Provider: p.cfg.Name, Type: p.cfg.Type, Event: note.Event, DeliveryID: note.ID}
	if sendErr != nil {
		now.Failing, now.Message = true, sendErr.Error()
	}
	i, found := slices.BinarySearchFunc(providers, now.Provider, func(d report.NotificationDelivery, name string) int {
		return cmp.Compare(d.Provider, name)
	})
	switch {
	case !found && !now.Failing:
		// A provider that never failed about this cluster: nothing to show.
		return nil
	case found && !providers[i].Failing && !now.Failing:
		return nil
	case found:
		providers[i] = now
	default:
		providers = slices.Insert(providers, i, now)
	}
	if err := n.remember(ctx, deliveriesKey(note.Cluster), providers); err != nil {
		return fmt.Errorf("delivery health of %s: %w", note.Cluster, err)
	}
	subject, err := bus.NotifySubject(note.Cluster)
	if err != nil {
		return err
	}
	_, err = n.cfg.Bus.Publish(ctx, subject, wire.NotificationHealthToProto(report.NotificationHealth{Cluster: note.Cluster, Providers: providers}))
	return err
}
