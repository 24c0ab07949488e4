package adopt

import (
	"bytes"
	"fmt"
	"strconv"

	"go.yaml.in/yaml/v3"

	"github.com/proxops/proxops/internal/inventory"
	"github.com/proxops/proxops/internal/manifest"
	"github.com/proxops/proxops/internal/repo"
)

// The cluster's own (datacenter) firewall is declared in the cluster's config.yaml, not in a manifest, and
// managed only where the config opts in (firewall.manage-cluster). Adoption writes no file for it: when the
// config does not manage it and the live firewall is not PVE's default, the result carries the block to add
// under pve.clusters.<name>, with manage-cluster: true and the live options and rules, so that the first plan
// after adding it changes nothing. It is owned as a whole once added, so a rule the model cannot carry is a
// gap and no block is offered: the firewall stays PVE's.

// clusterFirewallKind names the cluster's own firewall in gaps.
const clusterFirewallKind = "ClusterFirewall"

// adoptClusterFirewall sets Result.ClusterFirewall, or reports the rules that keep it from being offered.
func (r *run) adoptClusterFirewall() error {
	if r.in.ClusterFirewallManaged {
		return nil
	}
	cf := r.clusterFirewall()
	if cf == nil || !cf.ClusterRead {
		return nil
	}
	decl, gaps := clusterFirewallDecl(r.in.Cluster, cf)
	if len(gaps) > 0 {
		r.res.Gaps = append(r.res.Gaps, gaps...)
		return nil
	}
	if decl == nil {
		return nil
	}
	block, err := renderClusterFirewall(decl)
	if err != nil {
		return err
	}
	r.res.ClusterFirewall = block
	return nil
}

// clusterFirewallDecl is the live cluster firewall as its config.yaml declares it: nil when it is PVE's
// default (disabled, no owned option, no rule), else the declaration, or the gaps of the rules it cannot
// carry.
func clusterFirewallDecl(cluster string, cf *inventory.ClusterFirewall) (*repo.ClusterFirewall, []inventory.Gap) {
	decl := &repo.ClusterFirewall{ManageCluster: true}
	opts := cf.Options
	switch opts["enable"] {
	case "1":
		decl.Enabled = manifest.Bool(true)
	case "0":
		decl.Enabled = manifest.Bool(false)
	}
	decl.PolicyIn, decl.PolicyOut = opts["policy_in"], opts["policy_out"]
	var gaps []inventory.Gap
	gap := func(i int, value, note string) {
		gaps = append(gaps, inventory.Gap{Setting: inventory.Setting{Kind: clusterFirewallKind, Name: cluster,
			Key: "rules[" + strconv.Itoa(i) + "]", Value: value},
			Note: note + "; the cluster's firewall is not offered for adoption because a managed cluster firewall is owned as a whole"})
	}
	rules, ok := carryRules(cf.Rules, "rules", func(rules []manifest.FirewallRule) []manifest.FieldProblem {
		return manifest.CheckClusterFirewallRules("rules", rules)
	}, gap)
	if !ok {
		return nil, gaps
	}
	decl.Rules = rules
	if len(decl.Rules) == 0 && (decl.Enabled == nil || !*decl.Enabled) && decl.PolicyIn == "" && decl.PolicyOut == "" {
		return nil, nil
	}
	return decl, nil
}

// renderClusterFirewall writes the declaration as the firewall: block of a cluster's config, with a fixed key
// order and a 2-space indent.
func renderClusterFirewall(decl *repo.ClusterFirewall) ([]byte, error) {
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(map[string]*repo.ClusterFirewall{"firewall": decl}); err != nil {
		return nil, fmt.Errorf("render the cluster's firewall: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("render the cluster's firewall: %w", err)
	}
	return b.Bytes(), nil
}
