package pve_test

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/proxops/proxops/internal/firewall"
	"github.com/proxops/proxops/internal/inventory"
	"github.com/proxops/proxops/internal/plan"
	"github.com/proxops/proxops/internal/pve"
	"github.com/proxops/proxops/internal/pvesim"
)

// fwRecords is an ownership inventory of guests (by vmid) and firewall objects ("kind/name").
type fwRecords struct {
	guests  map[int]string
	objects map[string]bool
}

func (r fwRecords) RecordedFingerprint(_ context.Context, vmid int) (string, bool, error) {
	fp, ok := r.guests[vmid]
	return fp, ok, nil
}

func (r fwRecords) ObjectRecorded(_ context.Context, kind, id string) (bool, error) {
	return r.objects[kind+"/"+id], nil
}

func fwSpec() pvesim.Spec {
	spec := baseSpec()
	spec.Guests = []pvesim.GuestSpec{
		{VMID: 100, Type: "qemu", Node: "pve1", Config: seedVM},
		{VMID: 101, Type: "qemu", Node: "pve2", Config: "memory: 512\nname: foreign\n"},
	}
	return spec
}

func fwOpts() pve.ApplyOptions {
	return pve.ApplyOptions{Ownership: fwRecords{guests: map[int]string{100: seedVMFingerprint}},
		Objects: fwRecords{objects: map[string]bool{}}}
}

func fwRule(action, proto, dport, comment string) firewall.Rule {
	return firewall.Rule{Type: "in", Action: action, Proto: proto, DPort: dport, Comment: comment, Enable: true}
}

func rulesJSON(t *testing.T, rules ...firewall.Rule) string {
	t.Helper()
	fields := []map[string]string{}
	for _, r := range rules {
		fields = append(fields, r.Fields())
	}
	b, err := json.Marshal(fields)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func guestFWOp(vmid int, node string, params ...string) plan.Operation {
	op := plan.Operation{ID: "fw-" + node, Cluster: "lab", Node: node, Ref: "VM/web", VMID: vmid,
		GuestType: inventory.QEMU, Action: plan.ActionApplyGuestFirewall}
	for i := 0; i+1 < len(params); i += 2 {
		op.Params = append(op.Params, plan.KV{Key: params[i], Value: params[i+1]})
	}
	return op
}

func readFW(t *testing.T, cl *pve.Client, node string, vmid int) pve.GuestFirewall {
	t.Helper()
	f, err := cl.ReadGuestFirewall(testContext(t), node, "qemu", vmid)
	if err != nil {
		t.Fatalf("read firewall: %v", err)
	}
	return f
}

func TestGuestFirewallApplyConvergesInFewestWrites(t *testing.T) {
	c := newSim(t, fwSpec())
	cl := c.client(t)
	ctx := testContext(t)
	ssh, web, dns := fwRule("ACCEPT", "tcp", "22", "ssh"), fwRule("ACCEPT", "tcp", "443", "web"), fwRule("ACCEPT", "udp", "53", "dns")

	op := guestFWOp(100, "pve1", "rules", rulesJSON(t, ssh, web, dns),
		"ipsets", `[{"name":"admins","comment":"ops","entries":[{"cidr":"10.0.0.0/8"},{"cidr":"10.9.0.0/16","nomatch":true}]}]`,
		"aliases", `[{"name":"gw","cidr":"192.0.2.1"}]`)
	op.Values = []plan.KV{{Key: "enable", Value: "1"}, {Key: "policy_in", Value: "DROP"}}
	if _, err := cl.Apply(ctx, op, fwOpts()); err != nil {
		t.Fatalf("apply: %v", err)
	}
	f := readFW(t, cl, "pve1", 100)
	if !slices.Equal(f.Rules, []firewall.Rule{ssh, web, dns}) {
		t.Fatalf("rules %v", f.Rules)
	}
	if f.Options["enable"] != "1" || f.Options["policy_in"] != "DROP" {
		t.Fatalf("options %v", f.Options)
	}
	if len(f.IPSets) != 1 || len(f.IPSets[0].Entries) != 2 || len(f.Aliases) != 1 || f.Aliases[0].CIDR != "192.0.2.1" {
		t.Fatalf("ipsets %+v aliases %+v", f.IPSets, f.Aliases)
	}

	// The same declaration again writes nothing.
	writes := func() int {
		return c.count(http.MethodPost, "/nodes/{node}/qemu/{vmid}/firewall/rules") +
			c.count(http.MethodPut, "/nodes/{node}/qemu/{vmid}/firewall/rules/{pos}") +
			c.count(http.MethodDelete, "/nodes/{node}/qemu/{vmid}/firewall/rules/{pos}")
	}
	before := writes()
	out, err := cl.Apply(ctx, op, fwOpts())
	if err != nil || !out.AlreadyDone || writes() != before {
		t.Fatalf("second apply: %+v %v, %d rule writes", out, err, writes()-before)
	}

	// A reorder is one move, the rule list digest the plan observed checked first.
	reorder := guestFWOp(100, "pve1", "rules", rulesJSON(t, dns, ssh, web))
	reorder.Precondition.Expect = []plan.KV{{Key: "rules-digest", Value: f.RulesDigest}}
	if _, err := cl.Apply(ctx, reorder, fwOpts()); err != nil {
		t.Fatalf("reorder: %v", err)
	}
	if writes()-before != 1 {
		t.Fatalf("reorder took %d writes", writes()-before)
	}
	if f := readFW(t, cl, "pve1", 100); !slices.Equal(f.Rules, []firewall.Rule{dns, ssh, web}) {
		t.Fatalf("after reorder %v", f.Rules)
	}

	// IP sets and aliases no longer declared go; an emptied rule list is deleted.
	clear := guestFWOp(100, "pve1", "rules", "[]", "ipsets", "[]", "aliases", "[]")
	if _, err := cl.Apply(ctx, clear, fwOpts()); err != nil {
		t.Fatalf("clear: %v", err)
	}
	if f := readFW(t, cl, "pve1", 100); len(f.Rules)+len(f.IPSets)+len(f.Aliases) != 0 {
		t.Fatalf("left %+v", f)
	}
}

func TestGuestFirewallRefusesAnUnownedGuest(t *testing.T) {
	c := newSim(t, fwSpec())
	cl := c.client(t)
	_, err := cl.Apply(testContext(t), guestFWOp(101, "pve2", "rules", rulesJSON(t, fwRule("ACCEPT", "tcp", "22", ""))), fwOpts())
	wantRefusal(t, err, pve.RefusalNotOwned)
	if f := readFW(t, cl, "pve2", 101); len(f.Rules) != 0 {
		t.Fatalf("an unowned guest's rules were written: %v", f.Rules)
	}
}

func TestGuestFirewallConcurrentEditIsAConflict(t *testing.T) {
	var meddle atomic.Bool
	var inner http.Handler
	c := newSimHandler(t, fwSpec(), func(h http.Handler) http.Handler {
		inner = h
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			// Someone edits the rules right before the adapter's first rule update.
			if r.Method == http.MethodPut && strings.Contains(r.URL.Path, "/firewall/rules/") && meddle.CompareAndSwap(true, false) {
				req, _ := http.NewRequest(http.MethodPost, "/api2/json/nodes/pve1/qemu/100/firewall/rules",
					strings.NewReader("type=out&action=DROP&comment=hand"))
				req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
				req.Header.Set("Authorization", "PVEAPIToken="+pvesim.DefaultRootTokenID+"="+pvesim.DefaultRootTokenSecret)
				inner.ServeHTTP(discard{}, req)
			}
			h.ServeHTTP(w, r)
		})
	})
	cl := c.client(t)
	ctx := testContext(t)
	a, b := fwRule("ACCEPT", "tcp", "22", "a"), fwRule("ACCEPT", "tcp", "80", "b")
	if _, err := cl.Apply(ctx, guestFWOp(100, "pve1", "rules", rulesJSON(t, a, b)), fwOpts()); err != nil {
		t.Fatalf("seed: %v", err)
	}
	observed := readFW(t, cl, "pve1", 100).RulesDigest

	// Changed after the plan observed it: refused before any write.
	c.root(t, http.MethodPost, "/nodes/pve1/qemu/100/firewall/rules", "type", "in", "action", "DROP", "comment", "x")
	stale := guestFWOp(100, "pve1", "rules", rulesJSON(t, b, a))
	stale.Precondition.Expect = []plan.KV{{Key: "rules-digest", Value: observed}}
	if _, err := cl.Apply(ctx, stale, fwOpts()); pve.ClassOf(err) != plan.ErrorConflict {
		t.Fatalf("a stale plan: %v", err)
	}
	c.root(t, http.MethodDelete, "/nodes/pve1/qemu/100/firewall/rules/0")

	// Changed between the adapter's read and its write: PVE refuses the digest, a conflict.
	meddle.Store(true)
	_, err := cl.Apply(ctx, guestFWOp(100, "pve1", "rules", rulesJSON(t, b, a)), fwOpts())
	if pve.ClassOf(err) != plan.ErrorConflict || !strings.Contains(err.Error(), "changed by another writer") {
		t.Fatalf("a concurrent edit: %v", err)
	}
	if f := readFW(t, cl, "pve1", 100); f.Rules[0].Comment != "hand" || len(f.Rules) != 3 {
		t.Fatalf("the hand edit was overwritten: %v", f.Rules)
	}
}

type discard struct{}

func (discard) Header() http.Header         { return http.Header{} }
func (discard) Write(b []byte) (int, error) { return len(b), nil }
func (discard) WriteHeader(int)             {}

func fwObjOp(action plan.Action, kind, name string, params ...string) plan.Operation {
	op := plan.Operation{ID: string(action) + "-" + name, Cluster: "lab", Node: plan.ClusterScope, Ref: kind + "/" + name,
		Action: action, Params: []plan.KV{{Key: "kind", Value: kind}, {Key: "name", Value: name}}}
	for i := 0; i+1 < len(params); i += 2 {
		op.Params = append(op.Params, plan.KV{Key: params[i], Value: params[i+1]})
	}
	return op
}

func TestSecurityGroupLifecycleChecksMarkerAndRecord(t *testing.T) {
	c := newSim(t, fwSpec())
	cl := c.client(t)
	ctx := testContext(t)
	opts := fwOpts()
	rec := opts.Objects.(fwRecords)
	https := firewall.Rule{Type: "in", Action: "ACCEPT", Macro: "HTTPS", Enable: true}

	if _, err := cl.Apply(ctx, fwObjOp(plan.ActionCreateFirewallObject, pve.ObjectKindSecurityGroup, "web",
		"comment", "front", "rules", rulesJSON(t, https)), opts); err != nil {
		t.Fatalf("create: %v", err)
	}
	objs, err := cl.ReadClusterFirewallObjects(ctx)
	if err != nil || len(objs.Groups) != 1 || objs.Groups[0].Comment != "front [proxops]" || !slices.Equal(objs.Groups[0].Rules, []firewall.Rule{https}) {
		t.Fatalf("created %+v %v", objs.Groups, err)
	}
	ssh := firewall.Rule{Type: "in", Action: "ACCEPT", Macro: "SSH", Enable: true}
	configure := fwObjOp(plan.ActionConfigureFirewallObject, pve.ObjectKindSecurityGroup, "web", "comment", "edge", "rules", rulesJSON(t, ssh, https))
	_, err = cl.Apply(ctx, configure, opts)
	wantRefusal(t, err, pve.RefusalNotOwned) // marked, but no record
	rec.objects["securitygroup/web"] = true
	if _, err := cl.Apply(ctx, configure, opts); err != nil {
		t.Fatalf("configure: %v", err)
	}
	objs, _ = cl.ReadClusterFirewallObjects(ctx)
	if objs.Groups[0].Comment != "edge [proxops]" || !slices.Equal(objs.Groups[0].Rules, []firewall.Rule{ssh, https}) {
		t.Fatalf("configured %+v", objs.Groups[0])
	}
	if _, err := cl.Apply(ctx, fwObjOp(plan.ActionDeleteFirewallObject, pve.ObjectKindSecurityGroup, "web"), opts); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if objs, _ = cl.ReadClusterFirewallObjects(ctx); len(objs.Groups) != 0 {
		t.Fatalf("left %+v", objs.Groups)
	}
}

func TestUnmarkedFirewallObjectsAreNeverTouchedButCanBeClaimed(t *testing.T) {
	c := newSim(t, fwSpec())
	cl := c.client(t)
	ctx := testContext(t)
	opts := fwOpts()
	rec := opts.Objects.(fwRecords)
	c.root(t, http.MethodPost, "/cluster/firewall/ipset", "name", "admins", "comment", "by hand")
	c.root(t, http.MethodPost, "/cluster/firewall/ipset/admins", "cidr", "10.0.0.0/8")
	c.root(t, http.MethodPost, "/cluster/firewall/aliases", "name", "gw", "cidr", "192.0.2.1")
	rec.objects["ipset/admins"], rec.objects["alias/gw"] = true, true // a record alone is not enough

	_, err := cl.Apply(ctx, fwObjOp(plan.ActionConfigureFirewallObject, pve.ObjectKindIPSet, "admins", "comment", "ops", "entries", `[]`), opts)
	wantRefusal(t, err, pve.RefusalNotOwned)
	_, err = cl.Apply(ctx, fwObjOp(plan.ActionDeleteFirewallObject, pve.ObjectKindAlias, "gw"), opts)
	wantRefusal(t, err, pve.RefusalNotOwned)
	_, err = cl.Apply(ctx, fwObjOp(plan.ActionCreateFirewallObject, pve.ObjectKindAlias, "gw", "cidr", "192.0.2.9"), opts)
	if pve.ClassOf(err) != plan.ErrorConflict {
		t.Fatalf("create over an existing alias: %v", err)
	}

	claim := fwObjOp(plan.ActionClaimFirewallObject, pve.ObjectKindIPSet, "admins")
	claim.Precondition.Expect = []plan.KV{{Key: "comment", Value: "changed"}}
	_, err = cl.Apply(ctx, claim, opts)
	wantRefusal(t, err, pve.RefusalClaimMismatch)
	claim.Precondition.Expect = []plan.KV{{Key: "comment", Value: "by hand"}}
	if _, err := cl.Apply(ctx, claim, opts); err != nil {
		t.Fatalf("claim: %v", err)
	}
	entries := `[{"cidr":"10.1.0.0/16","comment":"vpn"},{"cidr":"10.1.2.0/24","nomatch":true}]`
	if _, err := cl.Apply(ctx, fwObjOp(plan.ActionConfigureFirewallObject, pve.ObjectKindIPSet, "admins", "comment", "by hand", "entries", entries), opts); err != nil {
		t.Fatalf("configure after claim: %v", err)
	}
	objs, _ := cl.ReadClusterFirewallObjects(ctx)
	want := []pve.IPSetEntry{{CIDR: "10.1.0.0/16", Comment: "vpn"}, {CIDR: "10.1.2.0/24", NoMatch: true}}
	if len(objs.IPSets) != 1 || objs.IPSets[0].Comment != "by hand [proxops]" || !slices.Equal(objs.IPSets[0].Entries, want) {
		t.Fatalf("ipset %+v", objs.IPSets)
	}
}

// A group's rules changed by hand after the plan observed them: the configure carries the observed digest
// and fails as a conflict without writing, so the hand edit stays for the next plan to show.
func TestSecurityGroupEditedSinceThePlanIsAConflict(t *testing.T) {
	c := newSim(t, fwSpec())
	cl := c.client(t)
	ctx := testContext(t)
	opts := fwOpts()
	opts.Objects.(fwRecords).objects["securitygroup/web"] = true
	https := firewall.Rule{Type: "in", Action: "ACCEPT", Macro: "HTTPS", Enable: true}
	if _, err := cl.Apply(ctx, fwObjOp(plan.ActionCreateFirewallObject, pve.ObjectKindSecurityGroup, "web",
		"comment", "front", "rules", rulesJSON(t, https)), opts); err != nil {
		t.Fatalf("create: %v", err)
	}
	objs, err := cl.ReadClusterFirewallObjects(ctx)
	if err != nil || len(objs.Groups) != 1 || objs.Groups[0].RulesDigest == "" {
		t.Fatalf("created %+v %v", objs.Groups, err)
	}
	observed := objs.Groups[0].RulesDigest
	c.root(t, http.MethodPost, "/cluster/firewall/groups/web", "type", "in", "action", "DROP", "comment", "hand", "enable", "1")

	ssh := firewall.Rule{Type: "in", Action: "ACCEPT", Macro: "SSH", Enable: true}
	stale := fwObjOp(plan.ActionConfigureFirewallObject, pve.ObjectKindSecurityGroup, "web", "comment", "front", "rules", rulesJSON(t, ssh, https))
	stale.Precondition.Expect = []plan.KV{{Key: "rules-digest", Value: observed}}
	if _, err := cl.Apply(ctx, stale, opts); pve.ClassOf(err) != plan.ErrorConflict {
		t.Fatalf("a configure planned before a hand edit: %v", err)
	}
	objs, _ = cl.ReadClusterFirewallObjects(ctx)
	if rules := objs.Groups[0].Rules; len(rules) != 2 || rules[0].Comment != "hand" {
		t.Fatalf("the hand edit was overwritten: %v", rules)
	}
}

// The cluster's own firewall converges with one operation: the rules first (position edits), then the
// options; a second delivery writes nothing; rules edited by hand since the plan are a conflict.
func TestClusterFirewallAppliesRulesThenOptionsAndRefusesAStaleList(t *testing.T) {
	c := newSim(t, fwSpec())
	cl := c.client(t)
	ctx := testContext(t)
	ssh := firewall.Rule{Type: "in", Action: "ACCEPT", Macro: "SSH", Enable: true}
	web := firewall.Rule{Type: "in", Action: "ACCEPT", Proto: "tcp", DPort: "8006", Enable: true}
	op := plan.Operation{ID: "cluster-firewall-apply", Cluster: "lab", Node: plan.ClusterScope, Ref: "ClusterFirewall/lab",
		Action: plan.ActionApplyClusterFirewall, Params: []plan.KV{{Key: "rules", Value: rulesJSON(t, ssh, web)}},
		Values: []plan.KV{{Key: "enable", Value: "1"}, {Key: "policy_in", Value: "DROP"}}}
	if _, err := cl.Apply(ctx, op, fwOpts()); err != nil {
		t.Fatalf("apply: %v", err)
	}
	cf := observeClusterFirewall(t, cl)
	if got := liveClusterRules(cf); !slices.Equal(got, []firewall.Rule{ssh, web}) {
		t.Fatalf("cluster rules %v", got)
	}
	if cf.Options["enable"] != "1" || cf.Options["policy_in"] != "DROP" {
		t.Fatalf("cluster options %v", cf.Options)
	}
	if out, err := cl.Apply(ctx, op, fwOpts()); err != nil || !out.AlreadyDone {
		t.Fatalf("a second delivery: %+v, %v", out, err)
	}

	c.root(t, http.MethodPost, "/cluster/firewall/rules", "type", "in", "action", "DROP", "comment", "hand", "enable", "1")
	stale := op
	stale.Params = []plan.KV{{Key: "rules", Value: rulesJSON(t, web)}}
	stale.Precondition.Expect = []plan.KV{{Key: "rules-digest", Value: cf.RulesDigest}}
	if _, err := cl.Apply(ctx, stale, fwOpts()); pve.ClassOf(err) != plan.ErrorConflict {
		t.Fatalf("a plan computed before a hand edit: %v", err)
	}
	if got := liveClusterRules(observeClusterFirewall(t, cl)); len(got) != 3 || got[0].Comment != "hand" {
		t.Fatalf("the hand edit was overwritten: %v", got)
	}
	op.Node = "pve1"
	if _, err := cl.Apply(ctx, op, fwOpts()); pve.ClassOf(err) != plan.ErrorTerminal {
		t.Fatalf("a cluster firewall operation for a node's queue: %v", err)
	}
}

func observeClusterFirewall(t *testing.T, cl *pve.Client) *inventory.ClusterFirewall {
	t.Helper()
	n, err := cl.Observe(testContext(t), pve.ObserveRequest{Cluster: "lab", Node: "pve1", ClusterFirewall: true})
	if err != nil || n.ClusterFirewall == nil || !n.ClusterFirewall.ClusterRead {
		t.Fatalf("observe the cluster's firewall: %+v, %v", n.ClusterFirewall, err)
	}
	return n.ClusterFirewall
}

func liveClusterRules(cf *inventory.ClusterFirewall) []firewall.Rule {
	var out []firewall.Rule
	for _, m := range cf.Rules {
		out = append(out, firewall.RuleFromFields(m))
	}
	return out
}

// For random pairs of live and declared rule lists (duplicates and disabled rules included), applying the
// declared list to a guest on the simulator leaves exactly the declared list, in order.
func TestGuestFirewallApplyReachesAnyDeclaredListOnTheSimulator(t *testing.T) {
	c := newSim(t, fwSpec())
	cl := c.client(t)
	ctx := testContext(t)
	r := rand.New(rand.NewPCG(7, 11))
	pool := []firewall.Rule{
		fwRule("ACCEPT", "tcp", "22", "ssh"), fwRule("ACCEPT", "tcp", "443", "web"), fwRule("ACCEPT", "udp", "53", "dns"),
		fwRule("DROP", "tcp", "25", "smtp"), fwRule("REJECT", "tcp", "3306", "db"), fwRule("ACCEPT", "tcp", "8080", "alt"),
	}
	randList := func() []firewall.Rule {
		out := make([]firewall.Rule, r.IntN(7))
		for i := range out {
			out[i] = pool[r.IntN(len(pool))]
			out[i].Enable = r.IntN(4) != 0
		}
		return out
	}
	apply := func(rules []firewall.Rule) {
		t.Helper()
		if _, err := cl.Apply(ctx, guestFWOp(100, "pve1", "rules", rulesJSON(t, rules...)), fwOpts()); err != nil {
			t.Fatalf("apply %v: %v", rules, err)
		}
		if got := readFW(t, cl, "pve1", 100).Rules; !slices.Equal(got, rules) && (len(got) > 0 || len(rules) > 0) {
			t.Fatalf("declared %v, the simulator holds %v", rules, got)
		}
	}
	for range 40 {
		apply(randList()) // the live list the next apply starts from
		apply(randList())
	}
}

// A create cut off after PVE made the group is carried on by its next delivery (the intent recorded before
// the create says the group is its own); without that intent a group of the name is someone else's.
func TestRedeliveredFirewallObjectCreateCarriesOn(t *testing.T) {
	c := newSim(t, fwSpec())
	cl := c.client(t)
	ctx := testContext(t)
	https := firewall.Rule{Type: "in", Action: "ACCEPT", Macro: "HTTPS", Enable: true}
	op := fwObjOp(plan.ActionCreateFirewallObject, pve.ObjectKindSecurityGroup, "web", "comment", "front", "rules", rulesJSON(t, https))
	j := &journal{}
	opts := fwOpts()
	opts.Journal = j
	// The first delivery made the group but not its rules.
	c.root(t, http.MethodPost, "/cluster/firewall/groups", "group", "web", "comment", "front [proxops]")
	if _, err := cl.Apply(ctx, op, opts); pve.ClassOf(err) != plan.ErrorConflict {
		t.Fatalf("a create over a group it did not make: %v", err)
	}
	if len(j.intents) != 0 {
		t.Fatalf("intents recorded before a refused create: %+v", j.intents)
	}
	c.root(t, http.MethodDelete, "/cluster/firewall/groups/web")
	if _, err := cl.Apply(ctx, op, opts); err != nil {
		t.Fatalf("create: %v", err)
	}
	if len(j.intents) != 1 {
		t.Fatalf("intents %+v, want the create's", j.intents)
	}
	c.root(t, http.MethodDelete, "/cluster/firewall/groups/web/0")
	again := opts
	again.Prior = pve.Prior{Intent: &j.intents[0]}
	if _, err := cl.Apply(ctx, op, again); err != nil {
		t.Fatalf("redelivered create: %v", err)
	}
	objs, err := cl.ReadClusterFirewallObjects(ctx)
	if err != nil || len(objs.Groups) != 1 || !slices.Equal(objs.Groups[0].Rules, []firewall.Rule{https}) {
		t.Fatalf("after the redelivery %+v %v", objs.Groups, err)
	}
}
