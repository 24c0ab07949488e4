package plan

import (
	"fmt"
	"slices"
	"strings"

	"github.com/proxops/proxops/internal/inventory"
	"github.com/proxops/proxops/internal/manifest"
	"github.com/proxops/proxops/internal/pveformat"
	"github.com/proxops/proxops/internal/pvewire"
)

// keepTagCase gives a resolved resource its declared tags with their case when the cluster keeps the
// case of tags (manifest.Resolve lower-cases them, as PVE's default tag-style does).
func keepTagCase(style pveformat.TagStyle, declared, resolved *manifest.Resource) {
	if !style.CaseSensitive {
		return
	}
	if v, rv := declared.VM(), resolved.VM(); v != nil && rv != nil {
		rv.Tags = style.Normalize(v.Tags)
	}
	if c, rc := declared.LXC(), resolved.LXC(); c != nil && rc != nil {
		rc.Tags = style.Normalize(c.Tags)
	}
}

// holdForeignPending stops the plan of a guest that holds a pending change to a key the model does not
// cover: ProxOps owns no value for it, so it can neither revert it nor judge it, and the start or restart
// of the guest (or, on a stopped VM, any config write) would apply it on someone else's behalf. Each such
// key is an anomaly, and nothing is written to the guest until someone applies or reverts the change on
// PVE. A pending change to a key the manifest owns is drift like any other: the plan writes the declared
// value, which PVE takes in place of the pending one (a value already pending that equals the manifest's is
// ProxOps' own, and only its restart remains). Pending changes to modelled keys the manifest leaves to PVE
// (such as the boot order PVE extends when a CD drive is added) do not stop it.
func (d *differ) holdForeignPending(s *guestUpdate) error {
	var foreign []string
	for _, k := range s.g.PendingKeys() {
		if !pvewire.IsModelled(s.g.Type, k) && !pvewire.IsBookkeeping(s.g.Type, k) {
			foreign = append(foreign, k)
		}
	}
	if len(foreign) == 0 {
		return nil
	}
	for _, k := range foreign {
		d.finding(FindingAnomaly, s.ref.String(), s.g.Node, s.g.VMID, k,
			fmt.Sprintf("pending change on PVE to a setting ProxOps does not manage (%s): apply it (restart the guest) or revert it on PVE first; ProxOps writes nothing to this guest until then", pendingText(s.g, k)))
	}
	s.halt = true
	return nil
}

// pendingText shows a pending change: "current → pending" or "delete current", secrets left out.
func pendingText(g *inventory.Guest, key string) string {
	for _, e := range g.Config {
		if e.Key != key {
			continue
		}
		before, after := e.Value, e.Pending
		if pvewire.IsSecretKey(key) || key == "sshkeys" {
			return "a new value"
		}
		before, after = pvewire.RedactValue(before), pvewire.RedactValue(after)
		if !e.HasValue {
			before = "(none)"
		}
		if e.Delete > 0 {
			return "delete " + before
		}
		return before + " → " + after
	}
	return "pending"
}

// planRegenerateCloudInit regenerates a VM's cloud-init drive when, after this plan's writes, it would
// not hold the cloud-init data the manifest declares: a declared key the drive was generated without
// (GET …/cloudinit reports it pending or deleted), or one this plan writes. A plan that ends with a start
// does not need it (PVE generates the drive at every start), nor does a running VM whose hotplug option
// holds cloudinit for the keys this plan writes (PVE regenerates the drive then), nor a drive that is still
// pending (PVE generates it when it applies it). Templates are left alone: their clones get their own
// drive.
func (d *differ) planRegenerateCloudInit(s *guestUpdate) error {
	g := s.g
	if g.Type != inventory.QEMU || !g.CloudInitDrive || g.Template || s.toTemplate || s.startsAtEnd() ||
		!pvewire.HasCurrentCloudInitDrive(s.current) {
		return nil
	}
	owned, err := pvewire.OwnedCloudInitKeys(d.desired(s.r))
	if err != nil || len(owned) == 0 {
		return err
	}
	stale := g.CloudInitStale()
	hotplugged := s.running && !s.stopped && strings.Contains(","+s.cfg["hotplug"]+",", ",cloudinit,")
	var changes []Change
	var keys []string
	for _, k := range owned {
		written := slices.ContainsFunc(s.diff.Changes, func(c pvewire.Change) bool { return c.Key == k })
		if !slices.Contains(stale, k) && !(written && !hotplugged) {
			continue
		}
		keys = append(keys, k)
		changes = append(changes, driveChange(g, k, s.expect, s.current))
	}
	if len(keys) == 0 {
		return nil
	}
	op := d.add(s, Operation{ID: d.opID(guestOpID(g.Type, g.VMID, ActionRegenerateCloudInit, "")), Action: ActionRegenerateCloudInit,
		Reason:  fmt.Sprintf("%s: regenerate the cloud-init drive (generated before %s changed)", s.ref, strings.Join(keys, ", ")),
		Changes: changes})
	op.Precondition.Fingerprint = s.fp
	return nil
}

// driveChange shows what the drive holds for a key and what it will hold: the config's value once this
// plan's writes are done. Secrets are not shown.
func driveChange(g *inventory.Guest, key string, expect, current map[string]string) Change {
	c := Change{Field: "cloud-init drive " + key}
	var e inventory.Entry
	for _, x := range g.CloudInit {
		if x.Key == key {
			e = x
		}
	}
	after, ok := expect[key]
	if !ok {
		after = current[key]
	}
	switch key {
	case "cipassword", "sshkeys":
		c.Before, c.After = "(generated earlier)", "(current)"
		if after == "" && ok {
			c.After = ""
		}
		if !e.HasValue && e.HasPending {
			c.Before = ""
		}
	default:
		c.Before, c.After = e.Value, after
	}
	return c
}
