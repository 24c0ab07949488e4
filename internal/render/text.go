package render

// Plans and rejections as the text `proxops diff` prints (the predecessor's layout, extended with ProxOps'
// actions and sections) and as JSON with a stable field order (docs/plan-format.md).

import (
	"time"

	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/proxops/proxops/internal/plan"
)

// Texts users grep for.
const (
	NoDriftCluster = "no drift — PVE matches git"
	NoDrift        = "no drift"
)

// verb is the word a line starts with: the action's name, except configure, shown as the predecessor's
// "update".
func verb(a plan.Action) string {
	if a == plan.ActionConfigure {
		return "update"
	}
	return string(a)
}

var findingVerb = map[plan.FindingKind]string{
	plan.FindingAnomaly:       "anomaly",
	plan.FindingMisplaced:     "misplaced",
	plan.FindingSkipped:       "skipped",
	plan.FindingDeferredPrune: "deferred",
	plan.FindingPending:       "pending",
	plan.FindingWarning:       "warning",
	plan.FindingSuspended:     "suspended",
}

// Text renders every cluster's plan, sorted by cluster, then the rejections: what `proxops diff` prints.
// With no cluster at all it says "no drift".
func Text(plans []plan.Plan, rejections []plan.Rejection) string {
	if len(plans) == 0 && len(rejections) == 0 {
		return NoDrift + "\n"
	}
	ps := slices.Clone(plans)
	slices.SortStableFunc(ps, func(a, b plan.Plan) int { return cmp.Compare(a.Cluster, b.Cluster) })
	rs := slices.Clone(rejections)
	slices.SortStableFunc(rs, func(a, b plan.Rejection) int { return cmp.Compare(a.Cluster, b.Cluster) })
	var b strings.Builder
	for _, p := range ps {
		b.WriteString(PlanText(p))
	}
	for _, r := range rs {
		b.WriteString(RejectionText(r))
	}
	return b.String()
}

// Clean reports whether a plan changes nothing and reports nothing that needs attention (skipped guests
// and warnings do not count; an artifact whose presence is unknown does).
func Clean(p plan.Plan) bool {
	if len(p.Operations) > 0 || p.Held {
		return false
	}
	for _, f := range p.Findings {
		// An untouched foreign guest is no drift; an artifact whose presence is unknown is.
		if !(f.Kind == plan.FindingSkipped && f.VMID != 0) && f.Kind != plan.FindingWarning {
			return false
		}
	}
	return true
}

type line struct {
	what, ref, node, id, reason string
	changes                     []plan.Change
}

// minWhatWidth is the width of a line's first column; a plan with a longer verb (mark-template,
// regenerate-cloudinit) widens it for all its lines, so the columns stay aligned.
const minWhatWidth = 12

func (l line) write(b *strings.Builder, width int) {
	fmt.Fprintf(b, "  %-*s %-24s %-10s id=%s  %s\n", width, l.what, l.ref, l.node, l.id, l.reason)
	for _, c := range l.changes {
		fmt.Fprintf(b, "      %s: %s → %s\n", c.Field, shown(c.Before), shown(c.After))
	}
}

func shown(v string) string {
	if v == "" {
		return "(none)"
	}
	return v
}

func vmidString(v int) string {
	if v == 0 {
		return "-"
	}
	return strconv.Itoa(v)
}

func opLine(o plan.Operation, withChanges bool) line {
	l := line{what: verb(o.Action), ref: o.Ref, node: o.Node, id: vmidString(o.VMID), reason: o.Reason}
	if withChanges {
		l.changes = o.Changes
	}
	return l
}

func findingLine(f plan.Finding) line {
	reason := f.Message
	if f.Field != "" {
		reason = f.Field + ": " + reason
	}
	return line{what: findingVerb[f.Kind], ref: f.Ref, node: f.Node, id: vmidString(f.VMID), reason: reason}
}

type section struct {
	title string
	lines []line
	note  []string
}

// PlanText renders one cluster's plan.
func PlanText(p plan.Plan) string {
	var b strings.Builder
	fmt.Fprintf(&b, "=== %s ===\n", p.Cluster)
	byKind := map[plan.FindingKind][]line{}
	for _, f := range p.Findings {
		byKind[f.Kind] = append(byKind[f.Kind], findingLine(f))
	}
	sections := append(operationSections(p),
		section{title: "deferred prunes (budget)", lines: byKind[plan.FindingDeferredPrune]},
		heldSection(p),
		section{title: "suspended from correction (rolled back by an operator; drift reported, not corrected)", lines: byKind[plan.FindingSuspended]},
		section{title: "pending until restart", lines: byKind[plan.FindingPending]},
		section{title: "misplaced (on another node)", lines: byKind[plan.FindingMisplaced]},
		section{title: "anomalies (never written; fix by hand or in git)", lines: byKind[plan.FindingAnomaly]},
		section{title: "skipped (no proxops tag)", lines: byKind[plan.FindingSkipped]},
		section{title: "warnings", lines: byKind[plan.FindingWarning]},
	)
	if Clean(p) {
		b.WriteString(NoDriftCluster + "\n")
	} else {
		fmt.Fprintf(&b, "plan %s\n", p.ID)
	}
	writeSections(&b, sections)
	if len(p.Gaps) > 0 {
		fmt.Fprintf(&b, "=== gaps (live settings the manifests do not carry; never written) (%d) ===\n", len(p.Gaps))
		for _, g := range p.Gaps {
			b.WriteString("  gap: " + gapDocument(g).text() + "\n")
		}
	}
	return b.String()
}

// The sections a plan's operations are listed in, in the order they are printed.
const (
	secSnapshots = iota
	secCreate
	secMove
	secUpdate
	secPower
	secDelete
)

// operationSections sorts a plan's operations into their sections: safety snapshots, creates, moves,
// updates, power changes and deletes.
func operationSections(p plan.Plan) []section {
	created, deleted := map[int]bool{}, map[int]bool{}
	for _, o := range p.Operations {
		switch o.Action {
		case plan.ActionCreate, plan.ActionClone:
			created[o.VMID] = true
		case plan.ActionDelete:
			deleted[o.VMID] = true
		default:
			// Updates and power changes are sorted into their sections below.
		}
	}
	out := []section{
		secSnapshots: {title: "safety snapshots"}, secCreate: {title: "will create"}, secMove: {title: "will move"},
		secUpdate: {title: "will update"}, secPower: {title: "power changes"}, secDelete: {title: "will delete (prune)"},
	}
	for _, o := range p.Operations {
		sec, detail := operationSection(o)
		switch {
		case o.Action == plan.ActionMarkTemplate && created[o.VMID] && o.VMID != 0:
			sec, detail = secCreate, false // a template made in this plan is part of its creation
		case o.Action == plan.ActionStop && deleted[o.VMID] && o.VMID != 0:
			sec = secDelete // the stop before a prune
		}
		out[sec].lines = append(out[sec].lines, opLine(o, detail))
	}
	return out
}

// operationSection is the section an operation is listed in, and whether its line shows the values it
// writes (an update's changes, what a new firewall object will hold: a group's rules in order, an IP set's
// entries).
func operationSection(o plan.Operation) (sec int, detail bool) {
	switch o.Action {
	case plan.ActionSnapshot, plan.ActionDeleteSnapshot, plan.ActionRollback:
		return secSnapshots, false
	case plan.ActionCreateFirewallObject:
		return secCreate, true
	case plan.ActionCreate, plan.ActionClone, plan.ActionDownload, plan.ActionCreatePool, plan.ActionCreateHAResource,
		plan.ActionCreateHARule, plan.ActionCreateBackupJob:
		return secCreate, false
	case plan.ActionDelete, plan.ActionDeletePool, plan.ActionDeleteHAResource, plan.ActionDeleteHARule,
		plan.ActionDeleteBackupJob, plan.ActionDeleteFirewallObject:
		return secDelete, false
	case plan.ActionMigrate, plan.ActionHAMigrate:
		return secMove, false
	case plan.ActionConfigure, plan.ActionClaimTag, plan.ActionResize, plan.ActionMarkTemplate,
		plan.ActionRegenerateCloudInit, plan.ActionClaimPool, plan.ActionConfigurePool, plan.ActionSetPoolMembers,
		plan.ActionApplyGuestFirewall, plan.ActionClaimClusterObject, plan.ActionConfigureHAResource,
		plan.ActionConfigureHARule, plan.ActionConfigureBackupJob, plan.ActionClaimFirewallObject,
		plan.ActionConfigureFirewallObject, plan.ActionApplyClusterFirewall:
		return secUpdate, true
	default:
		return secPower, false
	}
}

// heldSection lists what a held plan waits for confirmation on: prunes held by the mass-prune latch,
// firewall changes that could lock people out, and moves held by the migration latch.
func heldSection(p plan.Plan) section {
	held := section{title: "held for confirmation"}
	if len(p.HeldPrunes) > 0 {
		held.title += " (mass-prune latch)"
	}
	if !p.Held {
		return held
	}
	for _, ref := range p.HeldPrunes {
		held.lines = append(held.lines, line{what: "held", ref: ref, node: "", id: "-", reason: "prune waits for confirmation"})
	}
	for _, o := range p.Operations {
		switch {
		case !strings.Contains(o.Reason, plan.FirewallLockout):
		case o.Action == plan.ActionApplyGuestFirewall:
			held.lines = append(held.lines, line{what: "held", ref: o.Ref, node: o.Node, id: vmidString(o.VMID),
				reason: "firewall would drop every inbound connection; waits for confirmation"})
		case o.Action == plan.ActionApplyClusterFirewall:
			held.lines = append(held.lines, line{what: "held", ref: o.Ref, node: o.Node, id: vmidString(o.VMID),
				reason: "the cluster's firewall could cut administrators off (8006, 22); waits for confirmation"})
		}
	}
	if moves := heldMoves(p); len(moves) > 0 {
		held.title = "held for confirmation (migration latch)"
		if len(p.HeldPrunes) > 0 {
			held.title = "held for confirmation (mass-prune and migration latches)"
		}
		held.lines = append(held.lines, moves...)
	}
	held.note = []string{p.HeldReason, "confirm plan " + p.ID + " to apply it"}
	for i := range held.lines {
		for _, o := range p.Operations {
			if (o.Action == plan.ActionDelete || o.Action == plan.ActionDeleteFirewallObject) && o.Ref == held.lines[i].ref {
				held.lines[i].node, held.lines[i].id = o.Node, vmidString(o.VMID)
			}
		}
	}
	return held
}

// writeSections writes the sections that have lines, their first column as wide as the widest.
func writeSections(b *strings.Builder, sections []section) {
	width := minWhatWidth
	for _, s := range sections {
		for _, l := range s.lines {
			width = max(width, len(l.what))
		}
	}
	for _, s := range sections {
		if len(s.lines) == 0 {
			continue
		}
		fmt.Fprintf(b, "=== %s (%d) ===\n", s.title, len(s.lines))
		for _, n := range s.note {
			fmt.Fprintf(b, "  %s\n", n)
		}
		for _, l := range s.lines {
			l.write(b, width)
		}
	}
}

// rejectionPrefix is the predecessor's wording for why a cluster's cycle was aborted.
var rejectionPrefix = map[string]string{
	plan.RejectParse:    "manifest parse error",
	plan.RejectNode:     "unknown node",
	plan.RejectSecrets:  "cloud-init secret resolution",
	plan.RejectObserve:  "pve inventory read failed",
	plan.RejectInternal: "plan error",
	plan.RejectRollback: "rollback refused",
}

// RejectionText renders a rejected cluster: the ABORTED line and every diagnostic as path:line:col: Kind/name:
// field: message.
func RejectionText(r plan.Rejection) string {
	var b strings.Builder
	fmt.Fprintf(&b, "=== %s ===\n", r.Cluster)
	why := rejectionPrefix[r.Reason]
	if why == "" {
		why = r.Reason
	}
	errs, warns := r.Diagnostics.Count()
	counts := count(errs, "error")
	if warns > 0 {
		counts += ", " + count(warns, "warning")
	}
	fmt.Fprintf(&b, "ABORTED: %s (%s); nothing is written to PVE\n", why, counts)
	for _, d := range r.Diagnostics.Sorted() {
		fmt.Fprintf(&b, "  %s\n", d.String())
	}
	if !r.RetryAt.IsZero() {
		fmt.Fprintf(&b, "  the cause may pass: planned again at %s\n", r.RetryAt.UTC().Format(time.RFC3339))
	}
	return b.String()
}

// heldMoves are the lines of a plan's migrations when the migration latch holds it.
func heldMoves(p plan.Plan) []line {
	if !strings.Contains(p.HeldReason, "migration latch") {
		return nil
	}
	var out []line
	for _, o := range p.Operations {
		if o.Action.Moves() {
			target, _ := o.Param("target")
			out = append(out, line{what: "held", ref: o.Ref, node: o.Node, id: vmidString(o.VMID), reason: "move to " + target + " waits for confirmation"})
		}
	}
	return out
}
