package pipeline_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/proxops/proxops/internal/plan"
	"github.com/proxops/proxops/internal/pvesim"
	"github.com/proxops/proxops/internal/testkit"
	"github.com/proxops/proxops/services/planner"
)

// withFirewallObjects adds manifests of the cluster's firewall objects (path under the repository → YAML)
// to a repository's composition.
func withFirewallObjects(files repoFiles, objects map[string]string) repoFiles {
	out := repoFiles{}
	for k, v := range files {
		out[k] = v
	}
	for _, path := range slices.Sorted(func(yield func(string) bool) {
		for p := range objects {
			if !yield(p) {
				return
			}
		}
	}) {
		out[path] = objects[path]
		out["clusters/lab/resources.yaml"] += "  - ../../" + path + "\n"
	}
	return out
}

// fwEntries renders the live entries of a cluster IP set as "cidr" or "!cidr", sorted.
func (e *env) fwEntries(name string) []string {
	var out []string
	for _, m := range e.fwGet("/cluster/firewall/ipset/" + name) {
		c := fmt.Sprint(m["cidr"])
		if fmt.Sprint(m["nomatch"]) == "1" {
			c = "!" + c
		}
		out = append(out, c)
	}
	slices.Sort(out)
	return out
}

const webGroup = `apiVersion: proxops/v1alpha1
kind: SecurityGroup
metadata: {name: webservers}
spec:
  comment: web servers
  rules:
%s`

// The cluster's security group, IP set and alias declared in git converge on the simulator in one run
// (each marked and recorded, created before the guest rule that uses the group), and the next plan is
// empty; then the group's rules are reordered and extended, the IP set and alias dropped from git: the rules
// converge, the two objects are deleted and their records forgotten, and the next plan is empty again.
func TestClusterFirewallObjectsConvergeAndTheNextDiffIsEmpty(t *testing.T) {
	e := newEnv(t, pvesim.DefaultSpec())
	e.startExecutors("pve1", "pve2", "pve3")
	e.startPlanner(e.plannerConfig("a"))
	files := e.vms(map[string]int{"web": 101})
	files["vm/lab/web.yaml"] = vm("web", 101, "pve1") + `  firewall:
    enabled: true
    policy-in: DROP
    rules:
      - {type: group, action: webservers}
`
	objects := map[string]string{
		"securitygroup/lab/webservers.yaml": fmt.Sprintf(webGroup, `    - {type: in, action: ACCEPT, proto: tcp, dport: "443"}
    - {type: in, action: ACCEPT, macro: SSH, source: +office}
`),
		"ipset/lab/office.yaml": `apiVersion: proxops/v1alpha1
kind: IPSet
metadata: {name: office}
spec:
  entries:
    - {cidr: 198.51.100.0/24}
    - {cidr: 198.51.100.9, nomatch: true, comment: the printer}
    - {cidr: lan}
`,
		"alias/lab/lan.yaml": `apiVersion: proxops/v1alpha1
kind: Alias
metadata: {name: lan}
spec: {cidr: 192.0.2.0/24, comment: the lab's network}
`,
	}
	first := withFirewallObjects(files, objects)
	o := e.apply(first)
	var order []string
	for _, op := range o.planned[0].Plan.Operations {
		if op.Action == plan.ActionCreateFirewallObject || op.Action == plan.ActionApplyGuestFirewall {
			order = append(order, op.Ref)
		}
	}
	if want := []string{"Alias/lan", "IPSet/office", "SecurityGroup/webservers", "VM/web"}; !slices.Equal(order, want) {
		t.Fatalf("operations in order %v; want %v", order, want)
	}
	groups := e.fwGet("/cluster/firewall/groups")
	if len(groups) != 1 || groups[0]["group"] != "webservers" || groups[0]["comment"] != "web servers [proxops]" {
		t.Fatalf("groups: %v", groups)
	}
	want := []string{"type=in action=ACCEPT proto=tcp dport=443 enable=1", "type=in action=ACCEPT macro=SSH source=+office enable=1"}
	if got := ruleLines(e.fwGet("/cluster/firewall/groups/webservers")); !slices.Equal(got, want) {
		t.Fatalf("group rules:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if got := e.fwEntries("office"); !slices.Equal(got, []string{"!198.51.100.9", "198.51.100.0/24", "lan"}) {
		t.Fatalf("IP set office: %v", got)
	}
	if al := e.fwGet("/cluster/firewall/aliases/lan")[0]; al["cidr"] != "192.0.2.0/24" || al["comment"] != "the lab's network [proxops]" {
		t.Fatalf("alias lan: %v", al)
	}
	for _, k := range [][2]string{{"securitygroup", "webservers"}, {"ipset", "office"}, {"alias", "lan"}} {
		if !e.objectRecorded(k[0], k[1]) {
			t.Fatalf("%s %s has no ownership record", k[0], k[1])
		}
	}
	if got := ruleLines(e.fwGet("/nodes/pve1/qemu/101/firewall/rules")); !slices.Equal(got, []string{"type=group action=webservers enable=1"}) {
		t.Fatalf("guest rules: %v", got)
	}
	again := e.wait(e.announce(first, true), time.Minute)
	if len(again.planned) != 1 || !again.planned[0].Plan.Empty() {
		t.Fatalf("the converged plan is not empty: %+v", again.planned[0].Plan.Operations)
	}

	second := withFirewallObjects(files, map[string]string{
		"securitygroup/lab/webservers.yaml": fmt.Sprintf(webGroup, `    - {type: in, action: ACCEPT, macro: Ping}
    - {type: in, action: ACCEPT, proto: tcp, dport: "443"}
    - {type: in, action: ACCEPT, proto: tcp, dport: "80"}
`),
	})
	o = e.apply(second)
	var actions []plan.Action
	for _, op := range o.planned[0].Plan.Operations {
		actions = append(actions, op.Action)
	}
	if want := []plan.Action{plan.ActionConfigureFirewallObject, plan.ActionDeleteFirewallObject, plan.ActionDeleteFirewallObject}; !slices.Equal(actions, want) {
		t.Fatalf("actions %v; want %v", actions, want)
	}
	want = []string{"type=in action=ACCEPT macro=Ping enable=1", "type=in action=ACCEPT proto=tcp dport=443 enable=1",
		"type=in action=ACCEPT proto=tcp dport=80 enable=1"}
	if got := ruleLines(e.fwGet("/cluster/firewall/groups/webservers")); !slices.Equal(got, want) {
		t.Fatalf("group rules after the change:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if sets := e.fwGet("/cluster/firewall/ipset"); len(sets) != 0 {
		t.Fatalf("IP sets left: %v", sets)
	}
	if aliases := e.fwGet("/cluster/firewall/aliases"); len(aliases) != 0 {
		t.Fatalf("aliases left: %v", aliases)
	}
	if e.objectRecorded("ipset", "office") || e.objectRecorded("alias", "lan") || !e.objectRecorded("securitygroup", "webservers") {
		t.Fatal("records: the deleted IP set's and alias's are kept, or the group's is lost")
	}
	again = e.wait(e.announce(second, true), time.Minute)
	if len(again.planned) != 1 || !again.planned[0].Plan.Empty() {
		t.Fatalf("the converged plan is not empty: %+v", again.planned[0].Plan.Operations)
	}
}

// With firewall.manage-cluster the cluster's own firewall converges on the simulator (a group rule naming a
// SecurityGroup git declares, created first) and the next plan is empty; enabling it with nothing keeping
// 8006 and 22 reachable is held until confirmed, and nothing of it is written before.
func TestManagedClusterFirewallConvergesAndALockOutWaitsForConfirmation(t *testing.T) {
	e := newEnv(t, pvesim.DefaultSpec())
	e.startExecutors("pve1", "pve2", "pve3")
	e.startPlanner(e.plannerConfig("a"))
	files := withFirewallObjects(e.vms(map[string]int{"web": 101}), map[string]string{
		"securitygroup/lab/admin.yaml": `apiVersion: proxops/v1alpha1
kind: SecurityGroup
metadata: {name: admin}
spec:
  rules:
    - {type: in, action: ACCEPT, proto: tcp, dport: "22,8006"}
`})
	files["clusters/lab/config.yaml"] = e.lab(`      firewall:
        manage-cluster: true
        enabled: true
        policy-in: DROP
        rules:
          - {type: group, action: admin}
          - {type: in, action: ACCEPT, macro: Ping}
`)
	e.apply(files)
	want := []string{"type=group action=admin enable=1", "type=in action=ACCEPT macro=Ping enable=1"}
	if got := ruleLines(e.fwGet("/cluster/firewall/rules")); !slices.Equal(got, want) {
		t.Fatalf("cluster rules:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if opts := e.fwGet("/cluster/firewall/options")[0]; fmt.Sprint(opts["enable"]) != "1" || opts["policy_in"] != "DROP" {
		t.Fatalf("cluster options: %v", opts)
	}
	again := e.wait(e.announce(files, true), time.Minute)
	if len(again.planned) != 1 || !again.planned[0].Plan.Empty() {
		t.Fatalf("the converged plan is not empty: %+v", again.planned[0].Plan.Operations)
	}

	// The group rule goes: nothing accepts 8006 and 22 any more (a change into a lock-out).
	files["clusters/lab/config.yaml"] = e.lab(`      firewall:
        manage-cluster: true
        enabled: true
        policy-in: DROP
        rules:
          - {type: in, action: ACCEPT, macro: Ping}
`)
	ev := e.announce(files, false)
	var o outcome
	testkit.Eventually(t, time.Minute, "the lock-out plan to be held", func() bool {
		o = e.events(ev.EventID)
		return len(o.held) == 1
	})
	if pl := o.planned[0].Plan; !pl.Held || !strings.Contains(pl.HeldReason, "cluster firewall lock-out") {
		t.Fatalf("plan: held %v, reason %q", pl.Held, pl.HeldReason)
	}
	if got := ruleLines(e.fwGet("/cluster/firewall/rules")); !slices.Equal(got, want) {
		t.Fatalf("a held plan changed the cluster's rules: %v", got)
	}
	if err := planner.Confirm(testContext(t), e.bus, cluster, o.planned[0].Plan.ID, "test"); err != nil {
		t.Fatal(err)
	}
	if f := e.wait(ev, time.Minute).last(); f.Outcome != plan.OutcomeSucceeded {
		t.Fatalf("confirmed run: %+v", f)
	}
	if got := ruleLines(e.fwGet("/cluster/firewall/rules")); !slices.Equal(got, want[1:]) {
		t.Fatalf("cluster rules after the confirmed plan: %v", got)
	}
}
