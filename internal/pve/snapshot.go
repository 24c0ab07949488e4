package pve

import (
	"context"
	"net/http"
	"net/url"
	"strconv"

	"github.com/proxops/proxops/internal/inventory"
	"github.com/proxops/proxops/internal/plan"
)

// ObjectKindSnapshot is the ownership inventory's kind of a safety snapshot; its id is <vmid>/<name>.
const ObjectKindSnapshot = "snapshot"

// ListSnapshots reads GET …/snapshot of a guest: its snapshots, oldest first, without "current".
func (c *Client) ListSnapshots(ctx context.Context, node string, typ inventory.GuestType, vmid int) ([]inventory.Snapshot, error) {
	raw, err := c.get(ctx, "/nodes/{node}/"+string(typ)+"/{vmid}/snapshot", []string{node, strconv.Itoa(vmid)}, nil)
	if err != nil {
		return nil, failed(err, "list snapshots of %s %d", typ, vmid)
	}
	items, err := raw.objects()
	if err != nil {
		return nil, failed(err, "list snapshots of %s %d", typ, vmid)
	}
	var out []inventory.Snapshot
	for _, it := range items {
		name := it.str("name")
		if name == "" || name == "current" {
			continue
		}
		t, _ := it.int("snaptime")
		out = append(out, inventory.Snapshot{Name: name, Parent: it.str("parent"), Description: it.str("description"),
			Time: t, VMState: it.flag("vmstate"), State: it.str("snapstate")})
	}
	inventory.SortSnapshots(out)
	return out, nil
}

// ownSnapshot checks that the operation's snapshot is ProxOps' own: its name has the prefix and the
// ownership inventory, which the executor reads itself, holds its record. It returns the name. A refusal is
// terminal.
func (a *applier) ownSnapshot(ctx context.Context) (string, error) {
	name, _ := a.op.Param(plan.SnapshotNameParam)
	if !plan.IsOwnSnapshotName(name) {
		return "", refused(RefusalNotOwned, "%s: refused: snapshot %q is not named %s…, so it is not ProxOps'", a.what(), name, plan.SnapshotPrefix)
	}
	if a.opts.Objects == nil {
		return name, nil
	}
	ok, err := a.opts.Objects.ObjectRecorded(ctx, ObjectKindSnapshot, plan.SnapshotObjectID(a.op.VMID, name))
	if err != nil {
		return "", &Error{Class: plan.ErrorRetryable, Err: err}
	}
	if !ok {
		return "", refused(RefusalNotOwned, "%s: refused: ProxOps holds no record of snapshot %s of vmid %d", a.what(), name, a.op.VMID)
	}
	return name, nil
}

// snapshotStep checks what every snapshot operation needs (the snapshot is ProxOps', the guest is), waits
// for an earlier delivery's task, and returns the name and the guest's snapshots.
func (a *applier) snapshotStep(ctx context.Context, taskType string) (string, []inventory.Snapshot, error) {
	name, err := a.ownSnapshot(ctx)
	if err != nil {
		return "", nil, err
	}
	if _, err := a.settlePrior(ctx, TaskQuery{Node: a.op.Node, Type: taskType, ID: a.vmid()}); err != nil && ClassOf(err) != plan.ErrorTerminal {
		return "", nil, err
	}
	if _, err := a.readOwned(ctx); err != nil {
		return "", nil, err
	}
	snaps, err := a.c.ListSnapshots(ctx, a.op.Node, a.op.GuestType, a.op.VMID)
	return name, snaps, err
}

func snapshotTask(t inventory.GuestType, action string) string {
	if t == inventory.LXC {
		return "vz" + action
	}
	return "qm" + action
}

// snapshot takes the operation's snapshot (POST …/snapshot): one of that name already complete is done.
// vmstate=1 is sent only for a VM (PVE saves RAM only when it runs).
func (a *applier) snapshot(ctx context.Context) error {
	taskType := snapshotTask(a.op.GuestType, "snapshot")
	name, snaps, err := a.snapshotStep(ctx, taskType)
	if err != nil {
		return err
	}
	if s, ok := findSnapshot(snaps, name); ok && s.State == "" {
		a.out.AlreadyDone = true
		return nil
	}
	body := map[string]string{"snapname": name}
	if d, ok := a.op.Param("description"); ok && d != "" {
		body["description"] = d
	}
	if v, _ := a.op.Param("vmstate"); v == "1" && a.op.GuestType == inventory.QEMU {
		body["vmstate"] = "1"
	}
	return a.task(ctx, Intent{TaskType: taskType, Node: a.op.Node, ID: a.vmid(), VMID: a.op.VMID},
		http.MethodPost, "/nodes/{node}/"+a.typ()+"/{vmid}/snapshot", []string{a.op.Node, a.vmid()}, body)
}

// deleteSnapshot deletes the operation's snapshot (DELETE …/snapshot/{name}): one already gone is done.
func (a *applier) deleteSnapshot(ctx context.Context) error {
	taskType := snapshotTask(a.op.GuestType, "delsnapshot")
	name, snaps, err := a.snapshotStep(ctx, taskType)
	if err != nil {
		return err
	}
	if _, ok := findSnapshot(snaps, name); !ok {
		a.out.AlreadyDone = true
		return nil
	}
	u, ok, err := a.submit(ctx, Intent{TaskType: taskType, Node: a.op.Node, ID: a.vmid(), VMID: a.op.VMID},
		http.MethodDelete, "/nodes/{node}/"+a.typ()+"/{vmid}/snapshot/{snapname}", []string{a.op.Node, a.vmid(), name}, nil, nil)
	if err != nil {
		return failed(err, "%s %s", a.what(), name)
	}
	if ok {
		return a.wait(ctx, u)
	}
	return nil
}

// rollback rolls the guest back to the operation's snapshot (POST …/snapshot/{name}/rollback, start=1 when
// the operation says so). A rollback is not idempotent: it is sent once per delivery only when no earlier
// delivery's task is found.
func (a *applier) rollback(ctx context.Context) error {
	taskType := snapshotTask(a.op.GuestType, "rollback")
	name, err := a.ownSnapshot(ctx)
	if err != nil {
		return err
	}
	found, err := a.settlePrior(ctx, TaskQuery{Node: a.op.Node, Type: taskType, ID: a.vmid()})
	if found {
		if err != nil {
			return err
		}
		a.out.AlreadyDone = true
		return nil
	}
	if _, err := a.readOwned(ctx); err != nil {
		return err
	}
	snaps, err := a.c.ListSnapshots(ctx, a.op.Node, a.op.GuestType, a.op.VMID)
	if err != nil {
		return err
	}
	if _, ok := findSnapshot(snaps, name); !ok {
		return conflict("%s: snapshot %s of %s %d does not exist", a.what(), name, a.op.GuestType, a.op.VMID)
	}
	body := map[string]string{}
	if v, _ := a.op.Param("start"); v == "1" {
		body["start"] = "1"
	}
	return a.task(ctx, Intent{TaskType: taskType, Node: a.op.Node, ID: a.vmid(), VMID: a.op.VMID},
		http.MethodPost, "/nodes/{node}/"+a.typ()+"/{vmid}/snapshot/{snapname}/rollback", []string{a.op.Node, a.vmid(), name}, body)
}

// task submits a request that starts a task and waits for it.
func (a *applier) task(ctx context.Context, in Intent, method, tmpl string, args []string, body map[string]string) error {
	u, ok, err := a.submit(ctx, in, method, tmpl, args, url.Values{}, body)
	if err != nil {
		return failed(err, "%s", a.what())
	}
	if ok {
		return a.wait(ctx, u)
	}
	return nil
}

func findSnapshot(list []inventory.Snapshot, name string) (inventory.Snapshot, bool) {
	for _, s := range list {
		if s.Name == name {
			return s, true
		}
	}
	return inventory.Snapshot{}, false
}
