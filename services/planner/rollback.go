package planner

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/proxops/proxops/internal/bus"
	"github.com/proxops/proxops/internal/plan"
	"github.com/proxops/proxops/internal/repo"
	"github.com/proxops/proxops/internal/wire"
)

// An operator's rollback is planned (plan.RollbackPlan), signed and run like every plan. Once its rollback
// succeeded, the guest is suspended from correction in the cluster's control state (KV proxops_clusters), which
// every planner reads before it plans: the next drift tick reports the guest's drift and does not undo the
// rollback. A tree whose manifest of the guest differs from the one the rollback was planned with lifts the
// suspension (for good once such a plan is applied), and so does proxops resume CLUSTER/GUEST.

// manifestDigest is the digest of the file that declares a guest in a tree: what tells a later tree that
// changed the guest's manifest from one that did not. Empty when the guest is not declared.
func manifestDigest(fsys fs.FS, c *repo.Cluster, vmid int) string {
	if fsys == nil || c == nil {
		return ""
	}
	for _, r := range c.Resources {
		if !r.Kind.IsGuest() || r.VMID() != vmid || r.Source.File == "" {
			continue
		}
		b, err := fs.ReadFile(fsys, r.Source.File)
		if err != nil {
			return ""
		}
		sum := sha256.Sum256(b)
		return r.Source.File + ":" + strconv.Itoa(r.Source.Document) + ":" + hex.EncodeToString(sum[:16])
	}
	return ""
}

// suspensions splits a cluster's suspended guests into those that stay suspended for a tree and those the tree
// lifts: it changed (or no longer declares) the guest's manifest.
func suspensions(ctl wire.ClusterControl, fsys fs.FS, c *repo.Cluster) (kept, lifted []plan.SuspendedGuest) {
	for _, s := range ctl.SuspendedGuests {
		if manifestDigest(fsys, c, s.VMID) == s.Manifest {
			kept = append(kept, s)
		} else {
			lifted = append(lifted, s)
		}
	}
	return kept, lifted
}

// updateControl applies change to a cluster's control state with compare-and-set, retrying on a concurrent
// update; change returns false when there is nothing to write.
func updateControl(ctx context.Context, b *bus.Bus, cluster string, change func(*wire.ClusterControl) bool) (bool, error) {
	key, err := bus.ClusterKey(cluster)
	if err != nil {
		return false, err
	}
	for range 20 {
		m := wire.NewClusterControl()
		rev, err := b.GetProto(ctx, bus.BucketClusters, key, m)
		ctl := wire.ClusterControl{Cluster: cluster}
		switch {
		case errors.Is(err, bus.ErrNotFound):
			rev = 0
		case err != nil:
			return false, err
		default:
			if ctl, err = wire.ClusterControlFromProto(m); err != nil {
				return false, err
			}
			ctl.Cluster = cluster
		}
		if !change(&ctl) {
			return false, nil
		}
		out, err := wire.ClusterControlToProto(ctl)
		if err != nil {
			return false, err
		}
		if rev == 0 {
			_, err = b.CreateProto(ctx, bus.BucketClusters, key, out)
		} else {
			_, err = b.UpdateProto(ctx, bus.BucketClusters, key, out, rev)
		}
		if err == nil {
			return true, nil
		}
		if !errors.Is(err, bus.ErrRevisionMismatch) && !errors.Is(err, bus.ErrExists) {
			return false, err
		}
	}
	return false, fmt.Errorf("update the control state of %s: too many concurrent updates", cluster)
}

// ResumeGuest lifts the suspension of a guest an operator rolled back (proxops resume CLUSTER/GUEST): the
// cluster's next plan corrects it again. guest is its Kind/name, its name or its vmid. It returns the
// suspension lifted, and false when the guest was not suspended.
func ResumeGuest(ctx context.Context, b *bus.Bus, cluster, guest string) (plan.SuspendedGuest, bool, error) {
	var lifted plan.SuspendedGuest
	changed, err := updateControl(ctx, b, cluster, func(ctl *wire.ClusterControl) bool {
		i := slices.IndexFunc(ctl.SuspendedGuests, func(s plan.SuspendedGuest) bool { return namesGuest(s, guest) })
		if i < 0 {
			return false
		}
		lifted = ctl.SuspendedGuests[i]
		ctl.SuspendedGuests = slices.Delete(slices.Clone(ctl.SuspendedGuests), i, i+1)
		return true
	})
	return lifted, changed, err
}

// namesGuest reports whether a name given on the command line names a suspended guest.
func namesGuest(s plan.SuspendedGuest, name string) bool {
	_, short, _ := strings.Cut(s.Ref, "/")
	return name == s.Ref || name == short || name == strconv.Itoa(s.VMID)
}

// suspendAfterRollback records an operator's rollback that succeeded: the guest is suspended from correction,
// with the digest of its manifest in the tree the rollback was planned with.
func (d *driver) suspendAfterRollback(ctx context.Context, planned plan.Planned, op plan.Operation, log *slog.Logger) {
	by, _ := op.Param(plan.RequestedByParam)
	name, _ := op.Param(plan.SnapshotNameParam)
	digest := ""
	if r, err := d.p.repository(ctx, planned.Tree); err == nil {
		if fsys, err := d.p.treeFS(ctx, planned.Tree); err == nil {
			digest = manifestDigest(fsys, r.Cluster(d.cluster), op.VMID)
		}
	}
	s := plan.SuspendedGuest{VMID: op.VMID, Ref: op.Ref, Snapshot: name, By: by, At: time.Now().UTC(), RunID: planned.RunID, Manifest: digest}
	_, err := updateControl(ctx, d.p.bus, d.cluster, func(ctl *wire.ClusterControl) bool {
		ctl.SuspendedGuests = slices.DeleteFunc(slices.Clone(ctl.SuspendedGuests), func(x plan.SuspendedGuest) bool { return x.VMID == s.VMID })
		ctl.SuspendedGuests = append(ctl.SuspendedGuests, s)
		slices.SortFunc(ctl.SuspendedGuests, func(a, b plan.SuspendedGuest) int { return a.VMID - b.VMID })
		return true
	})
	if err != nil {
		log.Error("guest rolled back but not suspended from correction: the next plan may correct it", "vmid", op.VMID, "err", err)
		return
	}
	log.Info("guest rolled back by an operator; suspended from correction", "vmid", op.VMID, "snapshot", name, "requested_by", by)
}

// liftSuspensions forgets the suspensions a tree lifted, once a plan of that tree is applied.
func (d *driver) liftSuspensions(ctx context.Context, lifted []plan.SuspendedGuest, log *slog.Logger) {
	if len(lifted) == 0 {
		return
	}
	_, err := updateControl(ctx, d.p.bus, d.cluster, func(ctl *wire.ClusterControl) bool {
		n := len(ctl.SuspendedGuests)
		ctl.SuspendedGuests = slices.DeleteFunc(slices.Clone(ctl.SuspendedGuests), func(x plan.SuspendedGuest) bool {
			return slices.ContainsFunc(lifted, func(l plan.SuspendedGuest) bool { return l.VMID == x.VMID && l.RunID == x.RunID })
		})
		return len(ctl.SuspendedGuests) != n
	})
	if err != nil {
		log.Warn("suspensions lifted by the tree not forgotten", "err", err)
		return
	}
	for _, s := range lifted {
		log.Info("suspension lifted: the tree changes the guest's manifest", "vmid", s.VMID, "ref", s.Ref)
	}
}
