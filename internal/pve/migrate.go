package pve

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/proxops/proxops/internal/clock"
	"github.com/proxops/proxops/internal/inventory"
	"github.com/proxops/proxops/internal/plan"
	"github.com/proxops/proxops/internal/pveformat"
)

// migrateParams are the operation parameters a migration passes to PVE, per guest type.
var migrateParams = map[inventory.GuestType][]string{
	inventory.QEMU: {"online", "with-local-disks", "targetstorage", "bwlimit"},
	inventory.LXC:  {"restart", "timeout", "target-storage", "bwlimit"},
}

// migrate is POST …/{type}/{vmid}/migrate (tasks qmigrate, vzmigrate): the guest moves from the operation's
// node to the node Params target names. A delivery after a crash never starts a second migration: it first
// waits for the task an earlier delivery started (recorded, or found in the source's task list), then looks
// for the guest on the target (done) before it looks on the source; a guest still locked `migrate` is a
// migration in flight, waited for until the lock goes.
func (a *applier) migrate(ctx context.Context) error {
	target, _ := a.op.Param("target")
	if !pveformat.ValidNodeName(target) || target == a.op.Node {
		return terminal("%s: invalid target node %q", a.what(), target)
	}
	taskType := map[string]string{"qemu": "qmigrate", "lxc": "vzmigrate"}[a.typ()]
	found, priorErr := a.settlePrior(ctx, TaskQuery{Node: a.op.Node, Type: taskType, ID: a.vmid()})
	for attempt := 0; ; attempt++ {
		g, node, ok, err := a.waitSettled(ctx, []string{target, a.op.Node}, a.op.VMID, "migrate")
		if err != nil {
			return err
		}
		if !ok {
			return conflict("%s: %s %d is neither on node %s nor on node %s", a.what(), a.op.GuestType, a.op.VMID, a.op.Node, target)
		}
		if err := a.owned(ctx, g); err != nil {
			return err
		}
		if node == target {
			a.out.AlreadyDone = attempt == 0
			a.out.Fingerprint = inventory.Fingerprint(g)
			if found && priorErr == nil {
				a.out.AlreadyDone = true
			}
			return nil
		}
		if attempt > 0 {
			return conflict("%s: the migration task ended but %s %d is still on node %s", a.what(), a.op.GuestType, a.op.VMID, a.op.Node)
		}
		if found && priorErr != nil {
			a.out.Message = "earlier attempt failed: " + messageOf(priorErr)
		}
		if err := a.checkMigration(ctx, target); err != nil {
			return err
		}
		body := map[string]string{"target": target}
		for _, k := range migrateParams[a.op.GuestType] {
			if v, ok := a.op.Param(k); ok && v != "" {
				body[k] = v
			}
		}
		u, sent, err := a.submit(ctx, Intent{TaskType: taskType, Node: a.op.Node, ID: a.vmid(), VMID: a.op.VMID},
			http.MethodPost, "/nodes/{node}/"+a.typ()+"/{vmid}/migrate", []string{a.op.Node, a.vmid()}, nil, body)
		if err != nil {
			return failed(err, "%s to %s", a.what(), target)
		}
		if sent {
			if err := a.wait(ctx, u); err != nil {
				return err
			}
		}
	}
}

// MigrationCheck is what PVE answers about moving a guest (GET …/migrate?target=…): whether it runs and what
// ties it to its node.
type MigrationCheck struct {
	Running bool
	// LocalDisks are the guest's volumes on node-local storage; CDROMs are the ISO images among them.
	LocalDisks []string
	CDROMs     []string
	// LocalResources are the passthrough devices (hostpciN, usbN, …) that keep a VM on its node; Mapped are
	// those of them that use a cluster-wide mapping (and may move).
	LocalResources []string
	Mapped         []string
	// Allowed says whether target is among the nodes PVE allows (known only for a stopped guest: Known);
	// UnavailableStorages are the guest's storages the target lacks.
	Known               bool
	Allowed             bool
	UnavailableStorages []string
}

// CheckMigration asks PVE whether a guest can move from node to target (migrate_vm_precondition).
func (c *Client) CheckMigration(ctx context.Context, node string, t inventory.GuestType, vmid int, target string) (MigrationCheck, error) {
	raw, err := c.get(ctx, "/nodes/{node}/"+string(t)+"/{vmid}/migrate", []string{node, fmt.Sprint(vmid)}, url.Values{"target": {target}})
	if err != nil {
		return MigrationCheck{}, fmt.Errorf("migrate precondition of %s %d on %s: %w", t, vmid, node, err)
	}
	o, err := raw.object()
	if err != nil {
		return MigrationCheck{}, fmt.Errorf("migrate precondition of %s %d: %w", t, vmid, err)
	}
	out := MigrationCheck{Running: o.flag("running"), LocalResources: strList(o["local_resources"]),
		Mapped: strList(o["mapped-resources"])}
	disks, _ := o["local_disks"].([]any)
	for _, e := range disks {
		d, _ := e.(map[string]any)
		volid := object(d).str("volid")
		out.LocalDisks = append(out.LocalDisks, volid)
		if object(d).flag("cdrom") {
			out.CDROMs = append(out.CDROMs, volid)
		}
	}
	allowedKey, notAllowedKey := "allowed_nodes", "not_allowed_nodes"
	if t == inventory.LXC {
		allowedKey, notAllowedKey = "allowed-nodes", "not-allowed-nodes"
	}
	if o.has(allowedKey) || o.has(notAllowedKey) {
		out.Known = true
		out.Allowed = slices.Contains(strList(o[allowedKey]), target)
		na, _ := o[notAllowedKey].(map[string]any)
		if why, ok := na[target].(map[string]any); ok {
			out.UnavailableStorages = strList(why["unavailable_storages"])
		}
	}
	return out, nil
}

// strList reads a JSON array of strings.
func strList(v any) []string {
	arr, _ := v.([]any)
	var out []string
	for _, e := range arr {
		if s, ok := scalarString(e); ok {
			out = append(out, s)
		}
	}
	return out
}

// checkMigration asks PVE right before the move what it allows and refuses, terminally and naming the reason,
// a move PVE would start and then fail: a passthrough device, a local CD-ROM image, a storage the target lacks.
func (a *applier) checkMigration(ctx context.Context, target string) error {
	chk, err := a.c.CheckMigration(ctx, a.op.Node, a.op.GuestType, a.op.VMID, target)
	if err != nil {
		return failed(err, "%s", a.what())
	}
	var blocking []string
	for _, r := range chk.LocalResources {
		if !slices.Contains(chk.Mapped, r) {
			blocking = append(blocking, r)
		}
	}
	switch {
	case len(blocking) > 0:
		return terminal("%s: refused by PVE: it uses local devices (%s)", a.what(), strings.Join(blocking, ", "))
	case len(chk.CDROMs) > 0:
		return terminal("%s: refused by PVE: its CD-ROM holds a local image (%s)", a.what(), strings.Join(chk.CDROMs, ", "))
	case len(chk.UnavailableStorages) > 0:
		return terminal("%s: refused by PVE: node %s lacks storage %s", a.what(), target, strings.Join(chk.UnavailableStorages, ", "))
	}
	return nil
}

// haSID is the HA resource id of the operation's guest: vm:<vmid> or ct:<vmid>.
func (a *applier) haSID() string {
	if a.op.GuestType == inventory.LXC {
		return "ct:" + a.vmid()
	}
	return "vm:" + a.vmid()
}

// haMigrate moves an HA-managed guest through HA: POST /cluster/ha/resources/{sid}/migrate queues the request
// for the HA manager, which migrates the guest (how is HA's to decide). The operation is done when the
// manager reports the guest on the target and PVE finds it there, within the task timeout. A delivery after a
// crash never asks twice: a guest already on the target is done, and a migration HA is running is waited for.
func (a *applier) haMigrate(ctx context.Context) error {
	target, _ := a.op.Param("target")
	if !pveformat.ValidNodeName(target) || target == a.op.Node {
		return terminal("%s: invalid target node %q", a.what(), target)
	}
	sid := a.haSID()
	ctx, cancel := context.WithTimeout(ctx, a.c.cfg.TaskTimeout)
	defer cancel()
	delay := a.c.cfg.TaskPollMin
	asked, sawMove, missed := false, false, 0
	for {
		g, node, ok, err := a.waitSettled(ctx, []string{target, a.op.Node}, a.op.VMID, "migrate")
		if err != nil {
			return err
		}
		if !ok {
			// The config may move between the two reads: only a guest missing from both nodes three times in a row
			// is gone.
			if missed++; missed > 2 {
				return conflict("%s: %s %d is neither on node %s nor on node %s", a.what(), a.op.GuestType, a.op.VMID, a.op.Node, target)
			}
			if err := clock.Sleep(ctx, delay); err != nil {
				return failed(err, "%s: wait for HA to report %s on %s", a.what(), sid, target)
			}
			continue
		}
		missed = 0
		if err := a.owned(ctx, g); err != nil {
			return err
		}
		res, found, err := a.c.haResource(ctx, sid)
		if err != nil {
			return failed(err, "%s", a.what())
		}
		if !found {
			return conflict("%s: %s is no longer an HA resource; the next plan moves it directly", a.what(), sid)
		}
		moving := res.CRMState == "migrate" || res.CRMState == "relocate"
		sawMove = sawMove || moving
		switch {
		case node == target && !moving && (res.Node == "" || res.Node == target):
			a.out.AlreadyDone = !asked && !sawMove
			a.out.Fingerprint = inventory.Fingerprint(g)
			return nil
		case res.State == "ignored":
			return conflict("%s: HA ignores %s now; the next plan moves it directly", a.what(), sid)
		case !moving && !asked && res.Node != target:
			if _, err := a.c.request(ctx, true, http.MethodPost, "/cluster/ha/resources/{sid}/migrate", []string{sid}, nil,
				map[string]string{"node": target}); err != nil {
				return failed(err, "%s to %s", a.what(), target)
			}
			asked = true
			a.out.Message = fmt.Sprintf("asked HA to migrate %s to %s", sid, target)
		case !moving && sawMove && node != target && res.Node != target:
			// The guest was read before the HA status: a migration that ends between the two reads shows the
			// guest on the source and HA with it on the target, which the next round confirms. Only HA's own
			// word that the guest stayed elsewhere ends the wait.
			return &Error{Class: plan.ErrorRetryable, Err: fmt.Errorf("%s: HA's migration of %s to %s ended with the guest still on node %s", a.what(), sid, target, node)}
		}
		if a.opts.Progress != nil {
			a.opts.Progress(TaskStatus{Running: true})
		}
		if err := clock.Sleep(ctx, delay); err != nil {
			return failed(err, "%s: wait for HA to report %s on %s", a.what(), sid, target)
		}
		delay = min(delay*3/2, a.c.cfg.TaskPollMax)
	}
}

// haResource reads one HA resource with the manager's view of it.
func (c *Client) haResource(ctx context.Context, sid string) (HAResource, bool, error) {
	list, err := c.ListHAResources(ctx)
	if err != nil {
		return HAResource{}, false, err
	}
	for _, r := range list {
		if r.SID == sid {
			return r, true, nil
		}
	}
	return HAResource{}, false, nil
}
