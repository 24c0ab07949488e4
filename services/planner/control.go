package planner

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/proxops/proxops/internal/bus"
	"github.com/proxops/proxops/internal/plan"
	"github.com/proxops/proxops/internal/wire"
)

// SetSuspended suspends or resumes a cluster at run time (proxops suspend|resume): a suspended cluster's
// plans are computed and published, and nothing is applied. A run already in progress finishes; the
// suspension applies from the next plan. by says who asked, for status. It reports whether the state
// changed.
func SetSuspended(ctx context.Context, b *bus.Bus, cluster string, suspended bool, by string) (bool, error) {
	changed, err := updateControl(ctx, b, cluster, func(ctl *wire.ClusterControl) bool {
		if ctl.Suspended == suspended {
			return false
		}
		ctl.Suspended, ctl.SuspendedBy, ctl.SuspendedAt = suspended, "", time.Time{}
		if suspended {
			ctl.SuspendedBy, ctl.SuspendedAt = by, time.Now().UTC()
		}
		return true
	})
	if err != nil {
		return false, fmt.Errorf("suspend %s: %w", cluster, err)
	}
	return changed, nil
}

// Control reads a cluster's control state (the zero state when the cluster has none yet).
func Control(ctx context.Context, b *bus.Bus, cluster string) (wire.ClusterControl, error) {
	key, err := bus.ClusterKey(cluster)
	if err != nil {
		return wire.ClusterControl{}, err
	}
	m := wire.NewClusterControl()
	if _, err := b.GetProto(ctx, bus.BucketClusters, key, m); errors.Is(err, bus.ErrNotFound) {
		return wire.ClusterControl{Cluster: cluster}, nil
	} else if err != nil {
		return wire.ClusterControl{}, err
	}
	ctl, err := wire.ClusterControlFromProto(m)
	if err != nil {
		return wire.ClusterControl{}, err
	}
	ctl.Cluster = cluster
	return ctl, nil
}

// Confirm publishes a confirmation of a held plan (proxops.v1.confirm.<cluster>): it releases the run whose
// plan has this content id, and nothing else.
func Confirm(ctx context.Context, b *bus.Bus, cluster, planID, by string) error {
	subject, err := bus.ConfirmSubject(cluster)
	if err != nil {
		return err
	}
	if planID == "" {
		return errors.New("confirm: no plan id")
	}
	_, err = b.Publish(ctx, subject, wire.ConfirmationToProto(plan.Confirmation{Cluster: cluster, PlanID: planID, ConfirmedBy: by}))
	return err
}
