package pve

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/proxops/proxops/internal/firewall"
	"github.com/proxops/proxops/internal/plan"
	"github.com/proxops/proxops/internal/pveformat"
)

// The firewall: reading a guest's firewall and the cluster's firewall objects, applying a guest's declared
// firewall (ActionApplyGuestFirewall, on the guest's node), and the cluster's security groups, IP sets and
// aliases (the firewall object actions, on the cluster's work queue, owned as pools are: the ownership
// marker in the comment and a record in the ownership inventory, both checked right before each write).
//
// A rule list is changed with the fewest writes firewall.Plan finds. Before each write the list is read
// again and must be the one the edit expects (else another writer changed it: a conflict), and the write
// carries the digest just read, so PVE refuses it when the list changed in between.
//
// The operation's Params carry what is declared, each only when it is owned:
//   - rules: a JSON array of rule property maps (PVE names: type, action, macro, source, …, enable);
//   - ipsets: a JSON array of {name, comment, entries: [{cidr, nomatch, comment}]};
//   - aliases: a JSON array of {name, cidr, comment}.
//
// The guest's options are the operation's Values (an empty value deletes the option). The precondition's
// Expect may hold rules-digest, the digest of the rule list the plan observed.
//
// A firewall object operation's Params are kind (securitygroup, ipset, alias), name, comment (without the
// marker), and rules (a group's, as above), entries (an IP set's, as the ipsets entries) or cidr (an
// alias's); a claim's and a delete's Expect hold the comment the plan observed.

// The ownership inventory's kinds of the cluster's firewall objects.
const (
	ObjectKindSecurityGroup = "securitygroup"
	ObjectKindIPSet         = "ipset"
	ObjectKindAlias         = "alias"
)

// IPSet is a firewall IP set with its entries.
type IPSet struct {
	Name    string       `json:"name"`
	Comment string       `json:"comment,omitempty"`
	Entries []IPSetEntry `json:"entries"`
}

// IPSetEntry is one address or network of an IP set; NoMatch excludes it.
type IPSetEntry struct {
	CIDR    string `json:"cidr"`
	NoMatch bool   `json:"nomatch,omitempty"`
	Comment string `json:"comment,omitempty"`
}

// Alias is a firewall alias: a name for an address or network.
type Alias struct {
	Name    string `json:"name"`
	CIDR    string `json:"cidr"`
	Comment string `json:"comment,omitempty"`
}

// SecurityGroup is a cluster security group with its rules.
type SecurityGroup struct {
	Name        string
	Comment     string
	Rules       []firewall.Rule
	RulesDigest string
}

// GuestFirewall is a guest's firewall as PVE reports it.
type GuestFirewall struct {
	Options       map[string]string
	OptionsDigest string
	Rules         []firewall.Rule
	RulesDigest   string
	IPSets        []IPSet
	Aliases       []Alias
}

// ClusterFirewallObjects are the cluster's security groups, IP sets and aliases.
type ClusterFirewallObjects struct {
	Groups  []SecurityGroup
	IPSets  []IPSet
	Aliases []Alias
}

// fwBase is where a guest's firewall lives: the path template and its arguments.
type fwBase struct {
	tmpl string
	args []string
}

func guestFWBase(node, typ string, vmid int) fwBase {
	return fwBase{tmpl: "/nodes/{node}/{type}/{vmid}/firewall", args: []string{node, typ, strconv.Itoa(vmid)}}
}

var clusterFWBase = fwBase{tmpl: "/cluster/firewall"}

func (b fwBase) sub(tmpl string, args ...string) (string, []string) {
	return b.tmpl + tmpl, append(slices.Clone(b.args), args...)
}

// textMaps decodes a JSON list of objects with their values as text (PVE answers numbers for some).
func textMaps(raw json.RawMessage) ([]map[string]string, error) {
	var list []map[string]any
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, err
	}
	out := make([]map[string]string, 0, len(list))
	for _, e := range list {
		out = append(out, textMap(e))
	}
	return out, nil
}

func textMap(e map[string]any) map[string]string {
	m := map[string]string{}
	for k, v := range e {
		switch x := v.(type) {
		case string:
			m[k] = x
		case float64:
			m[k] = strconv.FormatFloat(x, 'f', -1, 64)
		case bool:
			m[k] = "0"
			if x {
				m[k] = "1"
			}
		}
	}
	return m
}

// readRules reads a rule list and its digest.
func (c *Client) readRules(ctx context.Context, tmpl string, args []string) ([]firewall.Rule, string, error) {
	raw, err := c.getRaw(ctx, tmpl, args, nil)
	if err != nil {
		return nil, "", fmt.Errorf("read firewall rules: %w", err)
	}
	list, err := textMaps(raw)
	if err != nil {
		return nil, "", fmt.Errorf("read firewall rules: %w", err)
	}
	rules := make([]firewall.Rule, len(list))
	digest := ""
	for i, m := range list {
		pos, err := strconv.Atoi(m["pos"])
		if err != nil || pos != i {
			return nil, "", fmt.Errorf("read firewall rules: rule %d has position %q", i, m["pos"])
		}
		rules[i], digest = firewall.RuleFromFields(m), m["digest"]
	}
	return rules, digest, nil
}

func (c *Client) readIPSets(ctx context.Context, b fwBase) ([]IPSet, error) {
	tmpl, args := b.sub("/ipset")
	raw, err := c.getRaw(ctx, tmpl, args, nil)
	if err != nil {
		return nil, fmt.Errorf("read firewall ipsets: %w", err)
	}
	list, err := textMaps(raw)
	if err != nil {
		return nil, fmt.Errorf("read firewall ipsets: %w", err)
	}
	var out []IPSet
	for _, m := range list {
		set := IPSet{Name: m["name"], Comment: m["comment"]}
		tmpl, args := b.sub("/ipset/{name}", set.Name)
		raw, err := c.getRaw(ctx, tmpl, args, nil)
		if err != nil {
			return nil, fmt.Errorf("read firewall ipset %s: %w", set.Name, err)
		}
		entries, err := textMaps(raw)
		if err != nil {
			return nil, fmt.Errorf("read firewall ipset %s: %w", set.Name, err)
		}
		for _, e := range entries {
			set.Entries = append(set.Entries, IPSetEntry{CIDR: e["cidr"], NoMatch: e["nomatch"] == "1", Comment: e["comment"]})
		}
		out = append(out, set)
	}
	return out, nil
}

func (c *Client) readAliases(ctx context.Context, b fwBase) ([]Alias, error) {
	tmpl, args := b.sub("/aliases")
	raw, err := c.getRaw(ctx, tmpl, args, nil)
	if err != nil {
		return nil, fmt.Errorf("read firewall aliases: %w", err)
	}
	list, err := textMaps(raw)
	if err != nil {
		return nil, fmt.Errorf("read firewall aliases: %w", err)
	}
	var out []Alias
	for _, m := range list {
		out = append(out, Alias{Name: m["name"], CIDR: m["cidr"], Comment: m["comment"]})
	}
	return out, nil
}

func (c *Client) readOptions(ctx context.Context, b fwBase) (map[string]string, string, error) {
	tmpl, args := b.sub("/options")
	raw, err := c.getRaw(ctx, tmpl, args, nil)
	if err != nil {
		return nil, "", fmt.Errorf("read firewall options: %w", err)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, "", fmt.Errorf("read firewall options: %w", err)
	}
	opts := textMap(m)
	digest := opts["digest"]
	delete(opts, "digest")
	return opts, digest, nil
}

// ReadGuestFirewall reads a guest's firewall: options, rules, IP sets and aliases.
func (c *Client) ReadGuestFirewall(ctx context.Context, node, typ string, vmid int) (GuestFirewall, error) {
	b := guestFWBase(node, typ, vmid)
	var f GuestFirewall
	var err error
	if f.Options, f.OptionsDigest, err = c.readOptions(ctx, b); err != nil {
		return f, err
	}
	tmpl, args := b.sub("/rules")
	if f.Rules, f.RulesDigest, err = c.readRules(ctx, tmpl, args); err != nil {
		return f, err
	}
	if f.IPSets, err = c.readIPSets(ctx, b); err != nil {
		return f, err
	}
	f.Aliases, err = c.readAliases(ctx, b)
	return f, err
}

// ReadClusterFirewallObjects reads the cluster's security groups (with their rules), IP sets and aliases.
func (c *Client) ReadClusterFirewallObjects(ctx context.Context) (ClusterFirewallObjects, error) {
	var o ClusterFirewallObjects
	raw, err := c.getRaw(ctx, "/cluster/firewall/groups", nil, nil)
	if err != nil {
		return o, fmt.Errorf("read security groups: %w", err)
	}
	groups, err := textMaps(raw)
	if err != nil {
		return o, fmt.Errorf("read security groups: %w", err)
	}
	for _, g := range groups {
		sg := SecurityGroup{Name: g["group"], Comment: g["comment"]}
		if sg.Rules, sg.RulesDigest, err = c.readRules(ctx, "/cluster/firewall/groups/{group}", []string{sg.Name}); err != nil {
			return o, fmt.Errorf("security group %s: %w", sg.Name, err)
		}
		o.Groups = append(o.Groups, sg)
	}
	if o.IPSets, err = c.readIPSets(ctx, clusterFWBase); err != nil {
		return o, err
	}
	o.Aliases, err = c.readAliases(ctx, clusterFWBase)
	return o, err
}

// fwWriter writes the firewall for one operation.
type fwWriter struct {
	c     *Client
	what  string
	wrote bool
}

func (w *fwWriter) write(ctx context.Context, method, tmpl string, args []string, body map[string]string) error {
	var err error
	if method == http.MethodDelete {
		q := map[string][]string{}
		for k, v := range body {
			q[k] = []string{v}
		}
		_, err = w.c.request(ctx, true, method, tmpl, args, q, nil)
	} else {
		_, err = w.c.request(ctx, true, method, tmpl, args, nil, body)
	}
	if err != nil {
		if strings.Contains(err.Error(), "detected modified configuration") {
			return conflict("%s: %s %s: changed by another writer meanwhile: %v", w.what, method, tmpl, err)
		}
		return failed(err, "%s: %s %s", w.what, method, tmpl)
	}
	w.wrote = true
	return nil
}

// rules makes the rule list at tmpl the declared one with the fewest writes. expectDigest, when set, is
// the digest of the list the plan observed: a list that differs from it (and is not yet the declared one)
// was changed by someone else, a conflict.
func (w *fwWriter) rules(ctx context.Context, tmpl string, args []string, declared []firewall.Rule, expectDigest string) error {
	live, digest, err := w.c.readRules(ctx, tmpl, args)
	if err != nil {
		return failed(err, "%s", w.what)
	}
	if slices.Equal(live, declared) {
		return nil
	}
	if expectDigest != "" && digest != expectDigest {
		return conflict("%s: the rules changed since the plan observed them (digest %s, observed %s)", w.what, digest, expectDigest)
	}
	for i, e := range firewall.Plan(live, declared) {
		if i > 0 {
			if live, digest, err = w.c.readRules(ctx, tmpl, args); err != nil {
				return failed(err, "%s", w.what)
			}
		}
		if !slices.Equal(live, e.Before) {
			return conflict("%s: the rules changed while they were written (before %s)", w.what, e)
		}
		body := map[string]string{}
		if digest != "" {
			body["digest"] = digest
		}
		switch e.Kind {
		case firewall.Create:
			maps.Copy(body, e.Rule.Fields())
			err = w.write(ctx, http.MethodPost, tmpl, args, body)
		case firewall.Update:
			set, del := firewall.UpdateParams(live[e.Pos], e.Rule)
			maps.Copy(body, set)
			if len(del) > 0 {
				body["delete"] = strings.Join(del, ",")
			}
			err = w.write(ctx, http.MethodPut, tmpl+"/{pos}", append(slices.Clone(args), strconv.Itoa(e.Pos)), body)
		case firewall.Move:
			body["moveto"] = strconv.Itoa(e.MoveTo)
			err = w.write(ctx, http.MethodPut, tmpl+"/{pos}", append(slices.Clone(args), strconv.Itoa(e.Pos)), body)
		case firewall.Delete:
			err = w.write(ctx, http.MethodDelete, tmpl+"/{pos}", append(slices.Clone(args), strconv.Itoa(e.Pos)), body)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// options writes the firewall options at b that differ from values (an empty value deletes the option),
// with the digest of the options just read.
func (w *fwWriter) options(ctx context.Context, b fwBase, values []plan.KV) error {
	if len(values) == 0 {
		return nil
	}
	opts, digest, err := w.c.readOptions(ctx, b)
	if err != nil {
		return failed(err, "%s", w.what)
	}
	body := map[string]string{}
	var del []string
	for _, kv := range values {
		cur, ok := opts[kv.Key]
		switch {
		case kv.Value == "" && ok:
			del = append(del, kv.Key)
		case kv.Value != "" && cur != kv.Value:
			body[kv.Key] = kv.Value
		}
	}
	if len(body) == 0 && len(del) == 0 {
		return nil
	}
	body["digest"] = digest
	if len(del) > 0 {
		body["delete"] = strings.Join(del, ",")
	}
	tmpl, args := b.sub("/options")
	return w.write(ctx, http.MethodPut, tmpl, args, body)
}

// entries makes an existing IP set's entries the declared ones.
func (w *fwWriter) entries(ctx context.Context, b fwBase, name string, live, declared []IPSetEntry) error {
	want := map[string]IPSetEntry{}
	for _, e := range declared {
		want[e.CIDR] = e
	}
	have := map[string]IPSetEntry{}
	for _, e := range live {
		have[e.CIDR] = e
	}
	for _, e := range live {
		if _, ok := want[e.CIDR]; !ok {
			tmpl, args := b.sub("/ipset/{name}/{cidr}", name, e.CIDR)
			if err := w.write(ctx, http.MethodDelete, tmpl, args, nil); err != nil {
				return err
			}
		}
	}
	for i := len(declared) - 1; i >= 0; i-- {
		e := declared[i]
		body := map[string]string{"cidr": e.CIDR, "nomatch": boolText(e.NoMatch)}
		if e.Comment != "" {
			body["comment"] = e.Comment
		}
		old, ok := have[e.CIDR]
		switch {
		case !ok:
			tmpl, args := b.sub("/ipset/{name}", name)
			if err := w.write(ctx, http.MethodPost, tmpl, args, body); err != nil {
				return err
			}
		case old != e:
			delete(body, "cidr")
			tmpl, args := b.sub("/ipset/{name}/{cidr}", name, e.CIDR)
			if err := w.write(ctx, http.MethodPut, tmpl, args, body); err != nil {
				return err
			}
		}
	}
	return nil
}

func boolText(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// applyGuestFirewall makes an owned guest's firewall the declared one: options first, then the IP sets and
// aliases its rules may name, then the rules, then the IP sets and aliases no longer declared.
func (a *applier) applyGuestFirewall(ctx context.Context) error {
	op := a.op
	g, err := a.readGuest(ctx, op.Node, op.VMID)
	if err != nil {
		return err
	}
	if err := a.owned(ctx, g); err != nil {
		return err
	}
	b := guestFWBase(op.Node, string(op.GuestType), op.VMID)
	w := &fwWriter{c: a.c, what: a.what()}
	if err := w.options(ctx, b, op.Values); err != nil {
		return err
	}
	var ipsets []IPSet
	ownIPSets := paramJSON(op, "ipsets", &ipsets)
	var aliases []Alias
	ownAliases := paramJSON(op, "aliases", &aliases)
	var ruleFields []map[string]string
	ownRules := paramJSON(op, "rules", &ruleFields)
	for _, bad := range []bool{errors.Is(ownIPSets, errBadParam), errors.Is(ownAliases, errBadParam), errors.Is(ownRules, errBadParam)} {
		if bad {
			return terminal("%s: a declared list is not valid JSON", a.what())
		}
	}
	var liveSets []IPSet
	if ownIPSets == nil {
		if liveSets, err = a.c.readIPSets(ctx, b); err != nil {
			return failed(err, "%s", a.what())
		}
		for _, set := range ipsets {
			i := slices.IndexFunc(liveSets, func(s IPSet) bool { return s.Name == set.Name })
			var live []IPSetEntry
			tmpl, args := b.sub("/ipset")
			switch {
			case i < 0:
				body := map[string]string{"name": set.Name}
				if set.Comment != "" {
					body["comment"] = set.Comment
				}
				if err := w.write(ctx, http.MethodPost, tmpl, args, body); err != nil {
					return err
				}
			case liveSets[i].Comment != set.Comment:
				if err := w.write(ctx, http.MethodPost, tmpl, args, map[string]string{"name": set.Name, "rename": set.Name, "comment": set.Comment}); err != nil {
					return err
				}
				live = liveSets[i].Entries
			default:
				live = liveSets[i].Entries
			}
			if err := w.entries(ctx, b, set.Name, live, set.Entries); err != nil {
				return err
			}
		}
	}
	var liveAliases []Alias
	if ownAliases == nil {
		if liveAliases, err = a.c.readAliases(ctx, b); err != nil {
			return failed(err, "%s", a.what())
		}
		for _, al := range aliases {
			i := slices.IndexFunc(liveAliases, func(x Alias) bool { return strings.EqualFold(x.Name, al.Name) })
			body := map[string]string{"cidr": al.CIDR, "comment": al.Comment}
			switch {
			case i < 0:
				body["name"] = al.Name
				tmpl, args := b.sub("/aliases")
				err = w.write(ctx, http.MethodPost, tmpl, args, body)
			case liveAliases[i] != al:
				if liveAliases[i].Name != al.Name {
					body["rename"] = al.Name
				}
				tmpl, args := b.sub("/aliases/{name}", liveAliases[i].Name)
				err = w.write(ctx, http.MethodPut, tmpl, args, body)
			}
			if err != nil {
				return err
			}
		}
	}
	if ownRules == nil {
		declared := make([]firewall.Rule, len(ruleFields))
		for i, m := range ruleFields {
			declared[i] = firewall.RuleFromFields(m)
		}
		tmpl, args := b.sub("/rules")
		if err := w.rules(ctx, tmpl, args, declared, expectValue(op, "rules-digest")); err != nil {
			return err
		}
	}
	for _, set := range liveSets {
		if !slices.ContainsFunc(ipsets, func(s IPSet) bool { return s.Name == set.Name }) {
			tmpl, args := b.sub("/ipset/{name}", set.Name)
			if err := w.write(ctx, http.MethodDelete, tmpl, args, map[string]string{"force": "1"}); err != nil {
				return err
			}
		}
	}
	for _, al := range liveAliases {
		if !slices.ContainsFunc(aliases, func(x Alias) bool { return strings.EqualFold(x.Name, al.Name) }) {
			tmpl, args := b.sub("/aliases/{name}", al.Name)
			if err := w.write(ctx, http.MethodDelete, tmpl, args, nil); err != nil {
				return err
			}
		}
	}
	a.out.AlreadyDone = !w.wrote
	return nil
}

var (
	errNoParam  = fmt.Errorf("no such parameter")
	errBadParam = fmt.Errorf("invalid parameter")
)

// paramJSON decodes a JSON parameter: nil when decoded, errNoParam when absent (not owned), errBadParam.
func paramJSON(op plan.Operation, key string, v any) error {
	raw, ok := op.Param(key)
	if !ok {
		return errNoParam
	}
	if err := json.Unmarshal([]byte(raw), v); err != nil {
		return errBadParam
	}
	return nil
}

func expectValue(op plan.Operation, key string) string {
	for _, kv := range op.Precondition.Expect {
		if kv.Key == key {
			return kv.Value
		}
	}
	return ""
}

// applyClusterFirewall makes the cluster's own (datacenter) firewall the declared one: the rules first (with
// the fewest position edits, while they are the ones the plan observed), then the options, so a firewall
// being enabled already has its rules. The datacenter firewall carries no ownership marker: the cluster's
// config.yaml opting in (firewall.manage-cluster) is what the planner asked for; nothing else is written.
func (c *Client) applyClusterFirewall(ctx context.Context, op plan.Operation) (Outcome, error) {
	var out Outcome
	if op.Node != plan.ClusterScope {
		return out, terminal("%s: the cluster's firewall is written from the cluster's work queue, not on node %q", op.Action, op.Node)
	}
	w := &fwWriter{c: c, what: string(op.Action)}
	var fields []map[string]string
	switch err := paramJSON(op, "rules", &fields); {
	case errors.Is(err, errNoParam):
		return out, terminal("%s: no rules", op.Action)
	case errors.Is(err, errBadParam):
		return out, terminal("%s: rules is not valid JSON", op.Action)
	}
	declared := make([]firewall.Rule, len(fields))
	for i, m := range fields {
		declared[i] = firewall.RuleFromFields(m)
	}
	if err := w.rules(ctx, "/cluster/firewall/rules", nil, declared, expectValue(op, "rules-digest")); err != nil {
		return out, classify(err)
	}
	if err := w.options(ctx, clusterFWBase, op.Values); err != nil {
		return out, classify(err)
	}
	out.AlreadyDone = !w.wrote
	return out, nil
}

// fwObject is one cluster firewall object as read.
type fwObject struct {
	comment string
	cidr    string
	rules   []firewall.Rule
	entries []IPSetEntry
}

// applyFirewallObject applies an operation on a security group, IP set or alias of the cluster.
func (c *Client) applyFirewallObject(ctx context.Context, op plan.Operation, opts ApplyOptions) (Outcome, error) {
	a := &applier{c: c, op: op, opts: opts}
	kind, _ := op.Param("kind")
	name, _ := op.Param("name")
	f := &fwObjectApplier{applier: a, kind: kind, name: name}
	f.w = &fwWriter{c: c, what: f.what()}
	if err := f.run(ctx); err != nil {
		return a.out, classify(err)
	}
	a.out.AlreadyDone = a.out.AlreadyDone || !f.w.wrote
	return a.out, nil
}

type fwObjectApplier struct {
	*applier
	kind, name string
	w          *fwWriter
}

func (f *fwObjectApplier) what() string { return fmt.Sprintf("%s %s %s", f.op.Action, f.kind, f.name) }

func (f *fwObjectApplier) run(ctx context.Context) error {
	if f.op.Node != plan.ClusterScope {
		return terminal("%s: a firewall object operation runs on the cluster's work queue, not on node %q", f.what(), f.op.Node)
	}
	switch f.kind {
	case ObjectKindSecurityGroup, ObjectKindIPSet, ObjectKindAlias:
	default:
		return terminal("%s: unknown firewall object kind %q", f.what(), f.kind)
	}
	if f.name == "" {
		return terminal("%s: no name", f.what())
	}
	switch f.op.Action {
	case plan.ActionCreateFirewallObject:
		return f.create(ctx)
	case plan.ActionConfigureFirewallObject:
		return f.configure(ctx)
	case plan.ActionClaimFirewallObject:
		return f.claim(ctx)
	case plan.ActionDeleteFirewallObject:
		return f.delete(ctx)
	default:
		return terminal("%s is not a firewall object action", f.op.Action)
	}
}

// read reads the object; found is false when the cluster has none of that name.
func (f *fwObjectApplier) read(ctx context.Context) (fwObject, bool, error) {
	objs, err := f.c.ReadClusterFirewallObjects(ctx)
	if err != nil {
		return fwObject{}, false, failed(err, "%s", f.what())
	}
	switch f.kind {
	case ObjectKindSecurityGroup:
		for _, g := range objs.Groups {
			if g.Name == f.name {
				return fwObject{comment: g.Comment, rules: g.Rules}, true, nil
			}
		}
	case ObjectKindIPSet:
		for _, s := range objs.IPSets {
			if s.Name == f.name {
				return fwObject{comment: s.Comment, entries: s.Entries}, true, nil
			}
		}
	case ObjectKindAlias:
		for _, al := range objs.Aliases {
			if strings.EqualFold(al.Name, f.name) {
				return fwObject{comment: al.Comment, cidr: al.CIDR}, true, nil
			}
		}
	}
	return fwObject{}, false, nil
}

// marked is the object as its ownership checks name it.
func (f *fwObjectApplier) marked() markedObject {
	return markedObject{what: f.what(), kind: f.kind, id: f.name}
}

// writeComment sets the object's comment (and an alias's address): PVE changes a group's or an IP set's
// comment through a create that renames the object to itself.
func (f *fwObjectApplier) writeComment(ctx context.Context, comment string) error {
	switch f.kind {
	case ObjectKindSecurityGroup:
		return f.w.write(ctx, http.MethodPost, "/cluster/firewall/groups", nil, map[string]string{"group": f.name, "rename": f.name, "comment": comment})
	case ObjectKindIPSet:
		return f.w.write(ctx, http.MethodPost, "/cluster/firewall/ipset", nil, map[string]string{"name": f.name, "rename": f.name, "comment": comment})
	}
	cidr, _ := f.op.Param("cidr")
	if cidr == "" {
		o, _, err := f.read(ctx)
		if err != nil {
			return err
		}
		cidr = o.cidr
	}
	return f.w.write(ctx, http.MethodPut, "/cluster/firewall/aliases/{name}", []string{f.name}, map[string]string{"cidr": cidr, "comment": comment})
}

// contents makes the object's rules, entries or address the declared ones.
func (f *fwObjectApplier) contents(ctx context.Context, o fwObject) error {
	switch f.kind {
	case ObjectKindSecurityGroup:
		var fields []map[string]string
		switch err := paramJSON(f.op, "rules", &fields); {
		case errors.Is(err, errNoParam):
			return nil
		case errors.Is(err, errBadParam):
			return terminal("%s: rules is not valid JSON", f.what())
		}
		declared := make([]firewall.Rule, len(fields))
		for i, m := range fields {
			declared[i] = firewall.RuleFromFields(m)
		}
		return f.w.rules(ctx, "/cluster/firewall/groups/{group}", []string{f.name}, declared, expectValue(f.op, "rules-digest"))
	case ObjectKindIPSet:
		var entries []IPSetEntry
		switch err := paramJSON(f.op, "entries", &entries); {
		case errors.Is(err, errNoParam):
			return nil
		case errors.Is(err, errBadParam):
			return terminal("%s: entries is not valid JSON", f.what())
		}
		return f.w.entries(ctx, clusterFWBase, f.name, o.entries, entries)
	}
	if cidr, ok := f.op.Param("cidr"); ok && cidr != o.cidr {
		return f.w.write(ctx, http.MethodPut, "/cluster/firewall/aliases/{name}", []string{f.name}, map[string]string{"cidr": cidr, "comment": o.comment})
	}
	return nil
}

// create creates the object with the marked comment, then its contents. An object of that name that exists
// is a conflict, unless it carries exactly the comment this operation writes (an earlier delivery created it).
func (f *fwObjectApplier) create(ctx context.Context) error {
	o, found, err := f.read(ctx)
	if err != nil {
		return err
	}
	switch {
	case found && (f.opts.Prior.Intent == nil || o.comment != f.comment()):
		return conflict("%s: an object of that name exists", f.what())
	case !found:
		// Recorded before the create: a delivery cut off after it finds the object with the comment it wrote
		// and carries on with the contents.
		if f.opts.Journal != nil {
			if err := f.opts.Journal.Intend(ctx, Intent{TaskType: "fwobjectcreate", Node: plan.ClusterScope, ID: f.kind + "/" + f.name,
				At: f.opts.Now()}); err != nil {
				return err
			}
		}
		var err error
		switch f.kind {
		case ObjectKindSecurityGroup:
			err = f.w.write(ctx, http.MethodPost, "/cluster/firewall/groups", nil, map[string]string{"group": f.name, "comment": f.comment()})
		case ObjectKindIPSet:
			err = f.w.write(ctx, http.MethodPost, "/cluster/firewall/ipset", nil, map[string]string{"name": f.name, "comment": f.comment()})
		case ObjectKindAlias:
			cidr, _ := f.op.Param("cidr")
			err = f.w.write(ctx, http.MethodPost, "/cluster/firewall/aliases", nil, map[string]string{"name": f.name, "cidr": cidr, "comment": f.comment()})
		}
		if err != nil {
			return err
		}
		if o, _, err = f.read(ctx); err != nil {
			return err
		}
	}
	return f.contents(ctx, o)
}

// configure writes an owned object's comment (marker kept) and contents.
func (f *fwObjectApplier) configure(ctx context.Context) error {
	o, found, err := f.read(ctx)
	if err != nil {
		return err
	}
	if !found {
		return conflict("%s: the object no longer exists", f.what())
	}
	if err := f.marked().owned(ctx, f.opts.Objects, o.comment); err != nil {
		return err
	}
	if o.comment != f.comment() {
		if err := f.writeComment(ctx, f.comment()); err != nil {
			return err
		}
		o.comment = f.comment()
	}
	return f.contents(ctx, o)
}

// claim adds the marker to the comment of the object the plan named, only while its comment is the one the
// plan observed.
func (f *fwObjectApplier) claim(ctx context.Context) error {
	o, found, err := f.read(ctx)
	if err != nil {
		return err
	}
	if !found {
		return conflict("%s: the object no longer exists", f.what())
	}
	if pveformat.Marked(o.comment) {
		return nil
	}
	if err := f.marked().claimable(o.comment, f.op.Precondition); err != nil {
		return err
	}
	return f.writeComment(ctx, pveformat.MarkComment(o.comment))
}

// delete deletes an owned object; one already gone is done. Its comment must still be the one the plan
// observed, when the operation carries it. A group's rules are deleted first (PVE refuses a group that has
// rules), an IP set goes with its entries.
func (f *fwObjectApplier) delete(ctx context.Context) error {
	o, found, err := f.read(ctx)
	if err != nil || !found {
		return err
	}
	if err := f.marked().owned(ctx, f.opts.Objects, o.comment); err != nil {
		return err
	}
	if err := f.marked().expected(o.comment, f.op.Precondition); err != nil {
		return err
	}
	switch f.kind {
	case ObjectKindSecurityGroup:
		if err := f.w.rules(ctx, "/cluster/firewall/groups/{group}", []string{f.name}, nil, expectValue(f.op, "rules-digest")); err != nil {
			return err
		}
		return f.w.write(ctx, http.MethodDelete, "/cluster/firewall/groups/{group}", []string{f.name}, nil)
	case ObjectKindIPSet:
		return f.w.write(ctx, http.MethodDelete, "/cluster/firewall/ipset/{name}", []string{f.name}, map[string]string{"force": "1"})
	}
	return f.w.write(ctx, http.MethodDelete, "/cluster/firewall/aliases/{name}", []string{f.name}, nil)
}
