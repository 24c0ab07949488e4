package pipeline_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/proxops/proxops/internal/plan"
	"github.com/proxops/proxops/internal/pvesim"
	"github.com/proxops/proxops/internal/testkit"
	"github.com/proxops/proxops/services/planner"
)

// fwGet reads a guest's firewall path from the simulator as PVE answers it.
func (e *env) fwGet(path string) []map[string]any {
	e.t.Helper()
	req, err := http.NewRequest(http.MethodGet, e.srv.URL+"/api2/json"+path, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Authorization", "PVEAPIToken="+pvesim.DefaultRootTokenID+"="+pvesim.DefaultRootTokenSecret)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	_ = res.Body.Close()
	if res.StatusCode != http.StatusOK {
		e.t.Fatalf("GET %s: %s: %s", path, res.Status, body)
	}
	var out struct {
		Data json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(body, &out); err != nil {
		e.t.Fatal(err)
	}
	var list []map[string]any
	if err := json.Unmarshal(out.Data, &list); err != nil {
		var one map[string]any
		if err := json.Unmarshal(out.Data, &one); err != nil {
			e.t.Fatalf("GET %s: %s", path, out.Data)
		}
		list = []map[string]any{one}
	}
	return list
}

// ruleLines renders the live rules as "type action macro proto dport enable" lines.
func ruleLines(rules []map[string]any) []string {
	var out []string
	for _, r := range rules {
		var parts []string
		for _, k := range []string{"type", "action", "macro", "source", "proto", "dport", "enable"} {
			if v, ok := r[k]; ok {
				parts = append(parts, fmt.Sprintf("%s=%v", k, v))
			}
		}
		out = append(out, strings.Join(parts, " "))
	}
	return out
}

func firewallVM(rules string) string {
	return vm("web", 101, "pve1") + `  firewall:
    enabled: true
    policy-in: DROP
    rules:
` + rules + `    ipsets:
      admins:
        entries:
          - {cidr: 192.0.2.0/24}
          - {cidr: 192.0.2.9, nomatch: true}
    aliases:
      gw: {cidr: 192.0.2.1}
`
}

// A guest's declared firewall converges on PVE: the guest is created stopped, its firewall applied, then
// started; the next plan is empty; a reorder and an added rule converge with position edits; and a change
// that would drop every inbound connection waits for its confirmation.
func TestGuestFirewallConvergesAndTheNextDiffIsEmpty(t *testing.T) {
	e := newEnv(t, pvesim.DefaultSpec())
	e.startExecutors("pve1", "pve2", "pve3")
	e.startPlanner(e.plannerConfig("a"))
	files := e.vms(map[string]int{"web": 101})
	files["vm/lab/web.yaml"] = firewallVM(`      - {type: in, action: ACCEPT, macro: ssh, source: +admins}
      - {type: in, action: ACCEPT, proto: tcp, dport: "443", dest: gw}
`)
	e.apply(files)
	const base = "/nodes/pve1/qemu/101/firewall"
	want := []string{"type=in action=ACCEPT macro=SSH source=+admins enable=1", "type=in action=ACCEPT proto=tcp dport=443 enable=1"}
	if got := ruleLines(e.fwGet(base + "/rules")); !slices.Equal(got, want) {
		t.Fatalf("live rules:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if opts := e.fwGet(base + "/options")[0]; fmt.Sprint(opts["enable"]) != "1" || opts["policy_in"] != "DROP" {
		t.Fatalf("live options: %v", opts)
	}
	// The guest first ran with its firewall in place.
	var order []string
	for _, r := range e.sim.Requests() {
		switch {
		case strings.HasSuffix(r.Path, "/qemu/101/firewall/rules") && r.Method == http.MethodPost:
			order = append(order, "rule")
		case strings.HasSuffix(r.Path, "/qemu/101/status/start"):
			order = append(order, "start")
		}
	}
	if len(order) != 3 || order[2] != "start" {
		t.Fatalf("writes in order: %v (want the rules before the start)", order)
	}
	if again := e.apply(files); len(again.planned[0].Plan.Operations) != 0 {
		t.Fatalf("converged firewall planned: %+v", again.planned[0].Plan.Operations)
	}

	files["vm/lab/web.yaml"] = firewallVM(`      - {type: in, action: ACCEPT, proto: tcp, dport: "443", dest: gw}
      - {type: in, action: ACCEPT, macro: Ping}
      - {type: in, action: ACCEPT, macro: SSH, source: +admins}
`)
	e.apply(files)
	want = []string{"type=in action=ACCEPT proto=tcp dport=443 enable=1", "type=in action=ACCEPT macro=Ping enable=1",
		"type=in action=ACCEPT macro=SSH source=+admins enable=1"}
	if got := ruleLines(e.fwGet(base + "/rules")); !slices.Equal(got, want) {
		t.Fatalf("live rules after the reorder:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if again := e.apply(files); len(again.planned[0].Plan.Operations) != 0 {
		t.Fatalf("converged firewall planned: %+v", again.planned[0].Plan.Operations)
	}

	files["vm/lab/web.yaml"] = firewallVM(`      - {type: out, action: ACCEPT, proto: tcp, dport: "443"}
`)
	ev := e.announce(files, false)
	var o outcome
	testkit.Eventually(t, time.Minute, "the lock-out plan to be held", func() bool {
		o = e.events(ev.EventID)
		return len(o.held) == 1
	})
	if pl := o.planned[0].Plan; !pl.Held || !strings.Contains(pl.HeldReason, "firewall lock-out") {
		t.Fatalf("plan: held %v, reason %q", pl.Held, pl.HeldReason)
	}
	if got := ruleLines(e.fwGet(base + "/rules")); len(got) != 3 {
		t.Fatalf("a held plan changed the rules: %v", got)
	}
	if err := planner.Confirm(testContext(t), e.bus, cluster, o.planned[0].Plan.ID, "test"); err != nil {
		t.Fatal(err)
	}
	if f := e.wait(ev, time.Minute).last(); f.Outcome != plan.OutcomeSucceeded {
		t.Fatalf("confirmed run: %+v", f)
	}
	if got := ruleLines(e.fwGet(base + "/rules")); !slices.Equal(got, []string{"type=out action=ACCEPT proto=tcp dport=443 enable=1"}) {
		t.Fatalf("live rules after the confirmed plan: %v", got)
	}
}
