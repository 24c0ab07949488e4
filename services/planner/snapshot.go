package planner

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/proxops/proxops/internal/bus"
	"github.com/proxops/proxops/internal/plan"
	"github.com/proxops/proxops/internal/wire"
)

// objectSnapshot is the ownership inventory's kind of a safety snapshot (pve.ObjectKindSnapshot).
const objectSnapshot = bus.ObjectSnapshot

// snapshotRecords reads the records of the safety snapshots ProxOps took in a cluster.
func (p *planner) snapshotRecords(ctx context.Context, cluster string) ([]plan.SnapshotRecord, error) {
	entries, err := p.bus.Entries(ctx, bus.BucketOwned, cluster+".obj."+string(objectSnapshot)+".>")
	if err != nil {
		return nil, fmt.Errorf("read snapshot records of %s: %w", cluster, err)
	}
	var out []plan.SnapshotRecord
	for _, e := range entries {
		rec, c, err := wire.UnmarshalOwnedSnapshot(e.Value)
		if err != nil || c != cluster {
			p.log.Warn("unusable snapshot record ignored", "cluster", cluster, "key", e.Key, "err", err)
			continue
		}
		out = append(out, rec)
	}
	return out, nil
}

// nameSnapshot names a snapshot operation for its run (proxops-<short plan id>), says in its description
// which plan and commit took it, and writes its record to the ownership inventory before the operation is
// dispatched: the executors take, delete and roll back to a snapshot only when that record exists.
func (d *driver) nameSnapshot(ctx context.Context, planned plan.Planned, op *plan.Operation, log *slog.Logger) error {
	change, _ := op.Param("description")
	commit := planned.Commit
	if commit == "" {
		commit = planned.Tree
	}
	*op = op.ForRun(planned.PlanID, commit)
	name, _ := op.Param(plan.SnapshotNameParam)
	rec := plan.SnapshotRecord{VMID: op.VMID, Name: name, Ref: op.Ref, Node: op.Node, RunID: planned.RunID,
		Commit: planned.Commit, Change: change, RecordedAt: time.Now().UTC()}
	key, err := bus.ObjectOwnedKey(d.cluster, objectSnapshot, plan.SnapshotObjectID(op.VMID, name))
	if err != nil {
		return err
	}
	m, err := wire.OwnedSnapshotToProto(d.cluster, rec)
	if err != nil {
		return err
	}
	if _, err := d.p.bus.PutProto(ctx, bus.BucketOwned, key, m); err != nil {
		return fmt.Errorf("snapshot record %s (%s) not written: %w", key, bus.BucketOwned, err)
	}
	log.Debug("snapshot recorded", "vmid", op.VMID, "snapshot", name)
	return nil
}

// forgetSnapshot removes the record of a snapshot ProxOps deleted.
func (d *driver) forgetSnapshot(ctx context.Context, vmid int, name string, log *slog.Logger) {
	key, err := bus.ObjectOwnedKey(d.cluster, objectSnapshot, plan.SnapshotObjectID(vmid, name))
	if err != nil {
		return
	}
	if err := d.p.bus.DeleteKey(ctx, bus.BucketOwned, key); err != nil {
		log.Warn("record of a deleted snapshot not removed", "vmid", vmid, "snapshot", name, "err", err)
	}
}

// opOf finds an operation of a plan by id.
func opOf(pl plan.Plan, id string) (plan.Operation, bool) {
	for _, o := range pl.Operations {
		if o.ID == id {
			return o, true
		}
	}
	return plan.Operation{}, false
}

// tookSnapshot counts a succeeded snapshot operation and forgets the record of a snapshot it deleted.
func (d *driver) tookSnapshot(ctx context.Context, pl plan.Plan, res plan.Result, log *slog.Logger) {
	switch res.Action {
	case plan.ActionSnapshot:
		d.p.metrics.snapshots.WithLabelValues("taken").Inc()
	case plan.ActionRollback:
		d.p.metrics.snapshots.WithLabelValues("rolled_back").Inc()
	case plan.ActionDeleteSnapshot:
		d.p.metrics.snapshots.WithLabelValues("pruned").Inc()
		if op, ok := opOf(pl, res.OpID); ok {
			name, _ := op.Param(plan.SnapshotNameParam)
			d.forgetSnapshot(ctx, res.VMID, name, log)
		}
	default:
		// Not a snapshot operation.
	}
}
