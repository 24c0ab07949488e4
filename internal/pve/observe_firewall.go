package pve

import (
	"context"
	"slices"
	"strings"

	"github.com/proxops/proxops/internal/inventory"
)

// observeFirewalls reads the firewall of the guests the request names (or of every guest) and, when asked,
// the cluster's firewall objects.
func (c *Client) observeFirewalls(ctx context.Context, req ObserveRequest, n *inventory.Node) error {
	for i := range n.Guests {
		g := &n.Guests[i]
		if !req.AllFirewalls && !slices.Contains(req.FirewallVMIDs, g.VMID) {
			continue
		}
		f, err := c.observeGuestFirewall(ctx, req.Node, string(g.Type), g.VMID)
		if err != nil {
			return failed(err, "observe the firewall of %s %d on %s", g.Type, g.VMID, req.Node)
		}
		g.Firewall = f
	}
	if !req.ClusterFirewall {
		return nil
	}
	objs, err := c.ReadClusterFirewallObjects(ctx)
	if err != nil {
		return failed(err, "observe the cluster's firewall objects")
	}
	cf := &inventory.ClusterFirewall{ObjectsRead: true, ClusterRead: true}
	if cf.Options, _, err = c.readOptions(ctx, clusterFWBase); err != nil {
		return failed(err, "observe the cluster's firewall options")
	}
	if cf.Rules, cf.RulesDigest, err = c.observeRules(ctx, clusterFWBase); err != nil {
		return failed(err, "observe the cluster's firewall rules")
	}
	for _, g := range objs.Groups {
		fg := inventory.FirewallGroup{Name: g.Name, Comment: g.Comment, RulesDigest: g.RulesDigest}
		for _, r := range g.Rules {
			fg.Rules = append(fg.Rules, r.Fields())
		}
		cf.Groups = append(cf.Groups, fg)
	}
	for _, s := range objs.IPSets {
		cf.IPSets = append(cf.IPSets, s.Name)
		fs := inventory.FirewallIPSet{Name: s.Name, Comment: s.Comment}
		for _, e := range s.Entries {
			fs.Entries = append(fs.Entries, inventory.FirewallIPSetEntry{CIDR: e.CIDR, NoMatch: e.NoMatch, Comment: e.Comment})
		}
		cf.IPSetObjects = append(cf.IPSetObjects, fs)
	}
	for _, a := range objs.Aliases {
		cf.Aliases = append(cf.Aliases, a.Name)
		cf.AliasObjects = append(cf.AliasObjects, inventory.FirewallAlias{Name: a.Name, CIDR: a.CIDR, Comment: a.Comment})
	}
	slices.SortFunc(cf.Groups, func(a, b inventory.FirewallGroup) int { return strings.Compare(a.Name, b.Name) })
	slices.Sort(cf.IPSets)
	slices.Sort(cf.Aliases)
	slices.SortFunc(cf.IPSetObjects, func(a, b inventory.FirewallIPSet) int { return strings.Compare(a.Name, b.Name) })
	slices.SortFunc(cf.AliasObjects, func(a, b inventory.FirewallAlias) int { return strings.Compare(a.Name, b.Name) })
	n.ClusterFirewall = cf
	return nil
}

// observeRules reads a rule list with every property PVE reports (without pos and digest), and its digest.
func (c *Client) observeRules(ctx context.Context, b fwBase) ([]map[string]string, string, error) {
	tmpl, args := b.sub("/rules")
	raw, err := c.getRaw(ctx, tmpl, args, nil)
	if err != nil {
		return nil, "", err
	}
	list, err := textMaps(raw)
	if err != nil {
		return nil, "", err
	}
	var rules []map[string]string
	digest := ""
	for _, m := range list {
		digest = m["digest"]
		delete(m, "digest")
		delete(m, "pos")
		rules = append(rules, m)
	}
	return rules, digest, nil
}

// observeGuestFirewall reads a guest's firewall with every rule property PVE reports (not only those the
// model knows), so a rule the model cannot carry is seen as such.
func (c *Client) observeGuestFirewall(ctx context.Context, node, typ string, vmid int) (*inventory.Firewall, error) {
	b := guestFWBase(node, typ, vmid)
	opts, _, err := c.readOptions(ctx, b)
	if err != nil {
		return nil, err
	}
	f := &inventory.Firewall{Options: opts}
	if f.Rules, f.RulesDigest, err = c.observeRules(ctx, b); err != nil {
		return nil, err
	}
	sets, err := c.readIPSets(ctx, b)
	if err != nil {
		return nil, err
	}
	for _, s := range sets {
		fs := inventory.FirewallIPSet{Name: s.Name, Comment: s.Comment}
		for _, e := range s.Entries {
			fs.Entries = append(fs.Entries, inventory.FirewallIPSetEntry{CIDR: e.CIDR, NoMatch: e.NoMatch, Comment: e.Comment})
		}
		f.IPSets = append(f.IPSets, fs)
	}
	aliases, err := c.readAliases(ctx, b)
	if err != nil {
		return nil, err
	}
	for _, a := range aliases {
		f.Aliases = append(f.Aliases, inventory.FirewallAlias{Name: a.Name, CIDR: a.CIDR, Comment: a.Comment})
	}
	slices.SortFunc(f.IPSets, func(a, b inventory.FirewallIPSet) int { return strings.Compare(a.Name, b.Name) })
	slices.SortFunc(f.Aliases, func(a, b inventory.FirewallAlias) int { return strings.Compare(a.Name, b.Name) })
	return f, nil
}
