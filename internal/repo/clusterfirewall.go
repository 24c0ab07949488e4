package repo

import (
	"github.com/proxops/proxops/internal/firewall"
	"github.com/proxops/proxops/internal/manifest"
)

// ClusterFirewall is the cluster's own (datacenter) firewall in its config.yaml (pve.clusters.<n>.firewall).
// Without ManageCluster it is out of scope: ProxOps neither reads nor writes the cluster's options and rules.
// With it, they are owned as a whole, as a guest's firewall is: an option left out is PVE's default, and
// the live rules become exactly the declared ones, in order.
type ClusterFirewall struct {
	// ManageCluster opts in to managing the cluster's firewall options and rules.
	ManageCluster bool `yaml:"manage-cluster"`
	// Enabled turns the cluster's firewall on (PVE enable; default off).
	Enabled *bool `yaml:"enabled,omitempty"`
	// PolicyIn and PolicyOut are ACCEPT, DROP or REJECT (PVE's defaults: DROP in, ACCEPT out).
	PolicyIn  string `yaml:"policy-in,omitempty"`
	PolicyOut string `yaml:"policy-out,omitempty"`
	// LogLevelIn and LogLevelOut are refused: PVE's cluster firewall has no such options (log levels are a
	// node's firewall options); they are read only to say so.
	LogLevelIn  string `yaml:"log-level-in,omitempty"`
	LogLevelOut string `yaml:"log-level-out,omitempty"`
	// Rules in the order PVE evaluates them: in, out and group rules; iface is a host interface.
	Rules []manifest.FirewallRule `yaml:"rules,omitempty"`
}

// ClusterFirewallOptionKeys are PVE's keys of the cluster firewall options ProxOps owns; the others
// (ebtables, log_ratelimit, policy_forward) it leaves alone.
var ClusterFirewallOptionKeys = []string{"enable", "policy_in", "policy_out"}

// Managed reports whether the cluster's own firewall is managed.
func (f *ClusterFirewall) Managed() bool { return f != nil && f.ManageCluster }

// PVEOptions are the declared options under PVE's keys (enable as 0 or 1); an option not declared is
// absent (PVE's default).
func (f *ClusterFirewall) PVEOptions() map[string]string {
	m := map[string]string{}
	if f.Enabled != nil {
		m["enable"] = "0"
		if *f.Enabled {
			m["enable"] = "1"
		}
	}
	for k, v := range map[string]string{"policy_in": f.PolicyIn, "policy_out": f.PolicyOut} {
		if v != "" {
			m[k] = v
		}
	}
	return m
}

// PVERules are the declared rules as PVE stores them.
func (f *ClusterFirewall) PVERules() []firewall.Rule {
	out := make([]firewall.Rule, len(f.Rules))
	for i, r := range f.Rules {
		out[i] = r.PVE()
	}
	return out
}

// validateClusterFirewall checks pve.clusters.<n>.firewall: the options' values and the rules as
// pve-firewall checks them; settings without manage-cluster are an error (they would do nothing).
func validateClusterFirewall(c *configChecker, p string, f *ClusterFirewall) {
	if f == nil {
		return
	}
	if !f.ManageCluster {
		if f.Enabled != nil || f.PolicyIn != "" || f.PolicyOut != "" || f.LogLevelIn != "" || f.LogLevelOut != "" || len(f.Rules) > 0 {
			c.errorf(p+".manage-cluster", "the cluster's firewall is declared but not managed: set manage-cluster: true to manage it, or remove its settings")
		}
		return
	}
	policies := []string{"ACCEPT", "DROP", "REJECT"}
	for _, o := range []struct{ field, v string }{{"policy-in", f.PolicyIn}, {"policy-out", f.PolicyOut}} {
		if o.v != "" {
			c.enum(p+"."+o.field, o.v, policies...)
		}
	}
	for _, o := range []struct{ field, v string }{{"log-level-in", f.LogLevelIn}, {"log-level-out", f.LogLevelOut}} {
		if o.v != "" {
			c.errorf(p+"."+o.field, "the cluster's firewall has no %s option: PVE sets log levels per node (pvesh set /nodes/<node>/firewall/options)", o.field)
		}
	}
	for _, pr := range manifest.CheckClusterFirewallRules(p+".rules", f.Rules) {
		c.errorf(pr.Field, "%s", pr.Message)
	}
}
