package planner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/proxops/proxops/internal/bus"
	"github.com/proxops/proxops/internal/clock"
	"github.com/proxops/proxops/internal/inventory"
	"github.com/proxops/proxops/internal/manifest"
	"github.com/proxops/proxops/internal/plan"
	"github.com/proxops/proxops/internal/wire"
)

// ownedObjects reads a cluster's ownership records of cluster objects (<cluster>.obj.<kind>.<id>).
func (p *planner) ownedObjects(ctx context.Context, cluster string) ([]plan.ObjectRecord, error) {
	filter, err := bus.ObjectOwnedFilter(cluster)
	if err != nil {
		return nil, err
	}
	entries, err := p.bus.Entries(ctx, bus.BucketOwned, filter)
	if err != nil {
		return nil, fmt.Errorf("read ownership inventory of %s's objects: %w", cluster, err)
	}
	var out []plan.ObjectRecord
	snapshots := cluster + ".obj." + string(bus.ObjectSnapshot) + "."
	for _, e := range entries {
		if strings.HasPrefix(e.Key, snapshots) {
			continue // safety snapshots keep records of their own form (snapshotRecords)
		}
		o, err := wire.UnmarshalOwnedObject(e.Value)
		if err != nil {
			p.log.Warn("unusable ownership record ignored", "cluster", cluster, "key", e.Key, "err", err)
			continue
		}
		out = append(out, o.ObjectRecord)
	}
	return out, nil
}

// recordObject stores a cluster object in the ownership inventory; the error names the record.
func (d *driver) recordObject(ctx context.Context, runID string, r plan.ObjectRecord, log *slog.Logger) error {
	key, err := bus.ObjectOwnedKey(d.cluster, bus.ObjectKind(r.Kind), r.ID)
	if err != nil {
		return fmt.Errorf("ownership record of %s %s not written: %w", r.Kind, r.ID, err)
	}
	m, err := wire.OwnedObjectToProto(wire.OwnedObject{Cluster: d.cluster, ObjectRecord: r, RunID: runID, RecordedAt: time.Now().UTC()})
	if err == nil {
		err = d.putOwned(ctx, key, m)
	}
	if err != nil {
		return fmt.Errorf("ownership record %s (%s) not written: %w", key, bus.BucketOwned, err)
	}
	log.Debug("object recorded as owned", "kind", r.Kind, "id", r.ID, "ref", r.Ref)
	return nil
}

// forgetObject removes a deleted cluster object from the ownership inventory.
// forgetRecordedObject forgets the ownership record of an object when there is one (a delete of a key that
// does not exist would still be written).
func (d *driver) forgetRecordedObject(ctx context.Context, kind, id string, log *slog.Logger) {
	key, err := bus.ObjectOwnedKey(d.cluster, bus.ObjectKind(kind), id)
	if err != nil {
		return
	}
	if _, _, err := d.p.bus.GetBytes(ctx, bus.BucketOwned, key); err != nil {
		if !errors.Is(err, bus.ErrNotFound) {
			log.Warn("ownership record of a deleted object not read", "kind", kind, "id", id, "err", err)
		}
		return
	}
	d.forgetObject(ctx, kind, id, log)
}

// haSID is the HA resource id of a guest.
func haSID(t inventory.GuestType, vmid int) string {
	if t == inventory.LXC {
		return manifest.HASID(manifest.KindLXC, vmid)
	}
	return manifest.HASID(manifest.KindVM, vmid)
}

func (d *driver) forgetObject(ctx context.Context, kind, id string, log *slog.Logger) {
	key, err := bus.ObjectOwnedKey(d.cluster, bus.ObjectKind(kind), id)
	if err != nil {
		return
	}
	if err := d.p.bus.DeleteKey(ctx, bus.BucketOwned, key); err != nil && !errors.Is(err, bus.ErrNotFound) {
		log.Warn("ownership record of a deleted object not removed", "kind", kind, "id", id, "err", err)
	}
}

// putOwned writes one ownership record, trying again a few times with a growing pause while ctx lasts: a
// record that is not written would leave PVE holding something ProxOps no longer knows it made.
func (d *driver) putOwned(ctx context.Context, key string, m proto.Message) error {
	var err error
	for attempt := range 5 {
		if _, err = d.p.bus.PutProto(ctx, bus.BucketOwned, key, m); err == nil {
			return nil
		}
		if attempt < 4 && clock.Sleep(ctx, time.Duration(attempt+1)*200*time.Millisecond) != nil {
			return err
		}
	}
	return err
}
