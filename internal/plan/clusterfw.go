package plan

import (
	"fmt"
	"slices"

	"github.com/proxops/proxops/internal/diag"
	"github.com/proxops/proxops/internal/firewall"
	"github.com/proxops/proxops/internal/manifest"
	"github.com/proxops/proxops/internal/repo"
)

// The cluster's own (datacenter) firewall: its options and rules, declared in the cluster's config.yaml
// under firewall and managed only when firewall.manage-cluster is true. Managed, it is owned as a whole, as
// a guest's firewall is: one apply-cluster-firewall operation on the cluster's work queue makes the options
// ProxOps owns (repo.ClusterFirewallOptionKeys) and the rules the declared ones, with the digest of the rule
// list the plan observed. A plan that would enable it with a dropping inbound policy and nothing keeping the
// web interface (8006) and SSH (22) reachable is held for confirmation, as a guest's lock-out is.

// clusterFirewallRef is the Ref of the operation on the cluster's own firewall.
func (d *differ) clusterFirewallRef() manifest.Ref {
	return manifest.Ref{Kind: "ClusterFirewall", Name: d.cluster}
}

// clusterFirewallConfig is the cluster's managed firewall declaration, nil when it is not managed.
func (d *differ) clusterFirewallConfig() *repo.ClusterFirewall {
	if cc := d.in.Cluster.Config; cc != nil && cc.Firewall.Managed() {
		return cc.Firewall
	}
	return nil
}

// configDiag is a diagnostic positioned in the cluster's config.yaml.
func (d *differ) configDiag(field, format string, args ...any) diag.Diagnostic {
	cc := d.in.Cluster.Config
	pos := cc.Positions.Lookup(field)
	return diag.Diagnostic{Severity: diag.Error, File: cc.File, Line: pos.Line, Column: pos.Column, Field: field,
		Message: fmt.Sprintf(format, args...)}
}

// checkClusterFirewall reports a managed cluster firewall whose live state was not observed (unobserved),
// and the names its rules use that neither git, nor PVE, nor the live cluster provide (a name only the live
// cluster provides is a warning).
func (d *differ) checkClusterFirewall() (diags diag.List, unobserved bool) {
	f := d.clusterFirewallConfig()
	if f == nil {
		return nil, false
	}
	p := "pve.clusters." + d.cluster + ".firewall"
	if cf := d.clusterFirewall(); cf == nil || !cf.ClusterRead {
		return diag.List{d.configDiag(p+".manage-cluster", "the cluster's firewall was not observed (an executor that does not read it?); it is not planned")}, true
	}
	for _, ref := range manifest.ClusterFirewallRefs(p+".rules", f.Rules) {
		diags = d.resolveFirewallRef(diags, d.clusterFirewallRef().String(), ref, d.configDiag(ref.Field, ""))
	}
	return diags.Sorted(), false
}

// managementEntries are the entries of the cluster's management IP set once the plan ran: as declared, or
// as live.
func (d *differ) managementEntries() []string {
	var out []string
	if r := d.fw.declared[fwKey(manifest.KindIPSet, "management")]; r != nil {
		for _, e := range r.IPSet().Entries {
			out = append(out, e.CIDR)
		}
		return out
	}
	if o, ok := d.fw.live[fwKey(manifest.KindIPSet, "management")]; ok {
		for _, e := range o.entries {
			out = append(out, e.CIDR)
		}
		return out
	}
	if cf := d.clusterFirewall(); cf != nil && slices.Contains(cf.IPSets, "management") {
		// Known to exist, its entries not read: counted as keeping access, as PVE's own rules do.
		out = append(out, "management")
	}
	return out
}

// planClusterFirewall converges the cluster's own firewall when it is managed, after the firewall objects
// its rules name; a change into a state that could lock administrators out holds the plan.
func (d *differ) planClusterFirewall() {
	f := d.clusterFirewallConfig()
	cf := d.clusterFirewall()
	if f == nil || cf == nil || !cf.ClusterRead {
		return
	}
	declared := f.PVERules()
	want := f.PVEOptions()
	fd := diffFirewall(repo.ClusterFirewallOptionKeys, want, cf.Options, cf.Rules, declared)
	values, changes, optionsChanged, live, ruleChanges := fd.values, fd.changes, fd.optionsChanged, fd.live, fd.ruleChanges
	if len(changes) == 0 {
		return
	}
	rules := make([]map[string]string, len(declared))
	for i, r := range declared {
		rules[i] = r.Fields()
	}
	ref := d.clusterFirewallRef()
	op := Operation{ID: d.opID("cluster-firewall-apply"), Cluster: d.cluster, Node: ClusterScope, Ref: ref.String(),
		Action: ActionApplyClusterFirewall, Values: values, Changes: changes,
		Params: []KV{{Key: "rules", Value: mustJSON(rules)}},
		Reason: fmt.Sprintf("%s: the cluster's firewall %s", ref, firewallSummary(optionsChanged, ruleChanges, changes))}
	if cf.RulesDigest != "" {
		op.Precondition.Expect = []KV{{Key: "rules-digest", Value: cf.RulesDigest}}
	}
	op.DependsOn = d.fwDeps(manifest.ClusterFirewallRefs("firewall.rules", f.Rules))
	groups, mgmt := d.firewallGroups(), d.managementEntries()
	locked, why := firewall.ClusterLockout(firewall.Cluster{Enabled: want["enable"] == "1", PolicyIn: want["policy_in"],
		Rules: declared, Groups: groups, Management: mgmt})
	wasLocked, _ := firewall.ClusterLockout(firewall.Cluster{Enabled: cf.Options["enable"] == "1",
		PolicyIn: cf.Options["policy_in"], Rules: live, Groups: groups, Management: mgmt})
	if locked && !wasLocked {
		op.Reason += " (" + FirewallLockout + ")"
		d.clusterFWHeld = why
		d.finding(FindingWarning, ref.String(), ClusterScope, 0, "pve.clusters."+d.cluster+".firewall",
			why+"; the plan is held until it is confirmed")
	}
	d.addUnit(&unit{ref: ref, level: fwLevel(manifest.KindSecurityGroup, false) + 1, node: ClusterScope, ops: []Operation{op}})
}

// hashClusterFirewall writes what the plan of the cluster's own firewall is computed from into its content
// id.
func (d *differ) hashClusterFirewall(w func(...string)) {
	cf := d.clusterFirewall()
	if d.clusterFirewallConfig() == nil || cf == nil {
		return
	}
	w("cluster-firewall", cf.RulesDigest)
	for _, k := range repo.ClusterFirewallOptionKeys {
		w(k, cf.Options[k])
	}
}
