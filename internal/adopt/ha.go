package adopt

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/proxops/proxops/internal/inventory"
	"github.com/proxops/proxops/internal/manifest"
	"github.com/proxops/proxops/internal/pveformat"
)

// guestHA is an adopted guest's spec.ha from its live HA resource, nil when it is none: the requested state
// (started, PVE's default, left out), max-restart and max-relocate where they are not PVE's default of 1,
// failback where PVE 9 has it off, and the comment without the ownership marker. A PVE 8 HA group is a gap
// (ProxOps does not manage HA groups). While HA manages the guest its run state is HA's: spec.state is left
// out then.
func (c *guest) guestHA(res *manifest.Resource) {
	h := c.r.in.Observed.HA()
	live, ok := h.Resource(manifest.HASID(c.kind, c.g.VMID))
	if !ok {
		return
	}
	if c.kind.IsTemplate() {
		c.gap("ha", live.State, "a template is an HA resource; a template never runs: remove the resource on PVE")
		return
	}
	ha := &manifest.GuestHA{Comment: pveformat.CommentText(live.Comment)}
	if live.State != manifest.HAStarted {
		ha.State = live.State
	}
	if live.MaxRestart != 1 {
		ha.MaxRestart = &live.MaxRestart
	}
	if live.MaxRelocate != 1 {
		ha.MaxRelocate = &live.MaxRelocate
	}
	if !live.Failback {
		ha.Failback = manifest.Bool(false)
	}
	if live.Group != "" {
		c.gap("ha.group", live.Group, "the HA resource is in HA group "+live.Group+" (PVE 8); ProxOps does not manage HA groups")
	}
	switch s := res.Spec.(type) {
	case *manifest.VMSpec:
		s.HA = ha
		if ha.Manages() {
			s.State = ""
		}
	case *manifest.LXCSpec:
		s.HA = ha
		if ha.Manages() {
			s.State = ""
		}
	}
	c.r.haNames[live.SID] = res.Ref()
}

// adoptHARules writes an HARule manifest for every live HA rule no declared HARule has the id of: its type,
// its resources by the manifest names of their guests (adopted now or declared), its nodes with their
// priorities, strict, affinity, disable and the comment without the ownership marker. A resource whose guest
// has no manifest with spec.ha leaves the manifest incomplete. Committed, it plans a claim of the rule.
func (r *run) adoptHARules() error {
	h := r.in.Observed.HA()
	if h == nil || !h.RulesRead {
		return nil
	}
	declared := map[string]bool{}
	for _, d := range r.in.Declared {
		if s := d.HARule(); s != nil {
			declared[s.IDOrName(d.Metadata.Name)] = true
		}
		if d.Kind.IsGuest() && d.GuestHA() != nil {
			if _, dup := r.haNames[manifest.HASID(d.Kind, d.VMID())]; !dup {
				r.haNames[manifest.HASID(d.Kind, d.VMID())] = d.Ref()
			}
		}
	}
	rules := slices.Clone(h.Rules)
	slices.SortFunc(rules, func(a, b inventory.HARule) int { return strings.Compare(a.ID, b.ID) })
	for _, rule := range rules {
		if declared[rule.ID] {
			continue
		}
		name := r.objectName(manifest.KindHARule, rule.ID, "rule")
		spec := &manifest.HARuleSpec{Type: rule.Type, Strict: rule.Strict, Affinity: rule.Affinity, Disable: rule.Disable,
			Comment: pveformat.CommentText(rule.Comment)}
		if name != rule.ID {
			spec.ID = rule.ID
		}
		var unresolved []string
		for _, sid := range slices.Sorted(slices.Values(rule.Resources)) {
			ref, ok := r.haNames[sid]
			if !ok {
				unresolved = append(unresolved, sid)
				continue
			}
			spec.Resources = append(spec.Resources, r.haGuestName(ref))
		}
		for _, e := range rule.Nodes {
			node, pri, _ := strings.Cut(e, ":")
			n := manifest.HARuleNode{Node: node}
			if p, err := strconv.Atoi(pri); err == nil {
				n.Priority = &p
			}
			spec.Nodes = append(spec.Nodes, n)
		}
		var incomplete []string
		for _, sid := range unresolved {
			incomplete = append(incomplete, fmt.Sprintf("spec.resources: HA resource %s has no guest manifest with spec.ha (a guest not adopted, or declared without spec.ha): add it by hand", sid))
		}
		if err := r.emitObject(manifest.KindHARule, name, spec, "HA rule "+rule.ID, incomplete...); err != nil {
			return err
		}
	}
	return nil
}

// haGuestName is how a rule names a guest: its manifest name, or Kind/name when a VM and a container share
// the name.
func (r *run) haGuestName(ref manifest.Ref) string {
	for _, other := range r.haNames {
		if other.Name == ref.Name && other.Kind != ref.Kind {
			return ref.String()
		}
	}
	return ref.Name
}
