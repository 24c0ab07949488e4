package pvesim_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/proxops/proxops/internal/pvesim"
)

const fwBase = "/nodes/pve1/qemu/100/firewall"

func fwCluster(t *testing.T) *testCluster {
	t.Helper()
	spec := pvesim.DefaultSpec()
	spec.Guests = []pvesim.GuestSpec{
		{VMID: 100, Type: "qemu", Node: "pve1", Config: "memory: 512\nname: a\n"},
		{VMID: 200, Type: "lxc", Node: "pve1", Config: "arch: amd64\nhostname: c\nmemory: 512\nostype: debian\n"},
	}
	return newCluster(t, spec)
}

type fwRuleReply struct {
	Pos     int    `json:"pos"`
	Type    string `json:"type"`
	Action  string `json:"action"`
	Macro   string `json:"macro"`
	Proto   string `json:"proto"`
	Dport   string `json:"dport"`
	Source  string `json:"source"`
	Comment string `json:"comment"`
	Enable  int    `json:"enable"`
	Digest  string `json:"digest"`
}

func (c *testCluster) fwRules(path string) ([]fwRuleReply, string) {
	c.t.Helper()
	r := c.do(http.MethodGet, path, nil)
	mustOK(c.t, r, "GET "+path)
	var out []fwRuleReply
	if err := json.Unmarshal(r.Data, &out); err != nil {
		c.t.Fatalf("GET %s: %s: %v", path, r.Data, err)
	}
	digest := ""
	if len(out) > 0 {
		digest = out[0].Digest
	}
	return out, digest
}

func comments(rules []fwRuleReply) []string {
	var out []string
	for _, r := range rules {
		out = append(out, r.Comment)
	}
	return out
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestFirewallRuleCreateGoesFirstWhateverPosSays(t *testing.T) {
	c := fwCluster(t)
	for _, name := range []string{"a", "b", "c"} {
		mustOK(t, c.do(http.MethodPost, fwBase+"/rules", form("type", "in", "action", "ACCEPT", "proto", "tcp",
			"dport", "22", "comment", name, "pos", "2", "enable", "1")), "create "+name)
	}
	rules, _ := c.fwRules(fwBase + "/rules")
	if got := comments(rules); !equalStrings(got, []string{"c", "b", "a"}) {
		t.Fatalf("order %v, want [c b a]", got)
	}
	for i, r := range rules {
		if r.Pos != i || r.Enable != 1 {
			t.Fatalf("rule %d: pos %d enable %d", i, r.Pos, r.Enable)
		}
	}
	mustOK(t, c.do(http.MethodPost, fwBase+"/rules", form("type", "in", "action", "DROP", "comment", "off")), "create off")
	rules, _ = c.fwRules(fwBase + "/rules")
	if rules[0].Comment != "off" || rules[0].Enable != 0 {
		t.Fatalf("a rule created without enable is disabled: %+v", rules[0])
	}
}

func TestFirewallRuleMovetoFollowsPVE(t *testing.T) {
	c := fwCluster(t)
	for _, name := range []string{"d", "c", "b", "a"} {
		mustOK(t, c.do(http.MethodPost, fwBase+"/rules", form("type", "in", "action", "ACCEPT", "comment", name)), name)
	}
	cases := []struct {
		pos, to string
		want    []string
	}{
		{"0", "2", []string{"b", "a", "c", "d"}}, // before the rule that was at 2
		{"3", "0", []string{"d", "b", "a", "c"}},
		{"1", "9", []string{"d", "a", "c", "b"}},       // past the end: last
		{"2", "2", []string{"d", "a", "ignored", "b"}}, // moveto == pos: an update in place
	}
	for _, tc := range cases {
		_, digest := c.fwRules(fwBase + "/rules")
		mustOK(t, c.do(http.MethodPut, fwBase+"/rules/"+tc.pos, form("moveto", tc.to, "digest", digest, "comment", "ignored")), "move")
		rules, _ := c.fwRules(fwBase + "/rules")
		if got := comments(rules); !equalStrings(got, tc.want) {
			t.Fatalf("move %s→%s: %v, want %v", tc.pos, tc.to, got, tc.want)
		}
	}
}

func TestFirewallConcurrentRuleEditIsRefusedByDigest(t *testing.T) {
	c := fwCluster(t)
	mustOK(t, c.do(http.MethodPost, fwBase+"/rules", form("type", "in", "action", "ACCEPT", "comment", "x")), "create")
	_, digest := c.fwRules(fwBase + "/rules")
	mustOK(t, c.do(http.MethodPut, fwBase+"/rules/0", form("comment", "y", "digest", digest)), "first edit")
	const modified = "detected modified configuration - file changed by other user? Try again.\n"
	wantFail(t, c.do(http.MethodPut, fwBase+"/rules/0", form("comment", "z", "digest", digest)), 500, modified)
	wantFail(t, c.do(http.MethodDelete, fwBase+"/rules/0", form("digest", digest)), 500, modified)
	rules, _ := c.fwRules(fwBase + "/rules")
	if rules[0].Comment != "y" {
		t.Fatalf("the stale writes changed the rule: %+v", rules[0])
	}
}

func TestFirewallRuleUpdateAndDelete(t *testing.T) {
	c := fwCluster(t)
	mustOK(t, c.do(http.MethodPost, fwBase+"/rules", form("type", "in", "action", "ACCEPT", "macro", "ssh",
		"source", "10.0.0.0/8", "comment", "x", "enable", "1")), "create")
	rules, digest := c.fwRules(fwBase + "/rules")
	if rules[0].Macro != "SSH" {
		t.Fatalf("macro stored as %q, want PVE's spelling SSH", rules[0].Macro)
	}
	mustOK(t, c.do(http.MethodPut, fwBase+"/rules/0", form("action", "DROP", "delete", "comment,source", "digest", digest)), "update")
	rules, _ = c.fwRules(fwBase + "/rules")
	if rules[0].Action != "DROP" || rules[0].Comment != "" || rules[0].Source != "" {
		t.Fatalf("after update: %+v", rules[0])
	}
	wantFail(t, c.do(http.MethodDelete, fwBase+"/rules/3", nil), 500, "no rule at position 3\n")
	mustOK(t, c.do(http.MethodDelete, fwBase+"/rules/0", nil), "delete")
	if rules, _ := c.fwRules(fwBase + "/rules"); len(rules) != 0 {
		t.Fatalf("rules left: %+v", rules)
	}
}

func TestFirewallRuleValidationUsesPVETexts(t *testing.T) {
	c := fwCluster(t)
	cases := []struct {
		form url.Values
		key  string
		want string
	}{
		{form("type", "in", "action", "ALLOW"), "action", "unknown action 'ALLOW'"},
		{form("type", "in", "action", "ACCEPT", "macro", "Nope"), "macro", "unknown macro 'Nope'"},
		{form("type", "in", "action", "ACCEPT", "dport", "22"), "proto", "missing property - 'dport' requires this property"},
		{form("type", "in", "action", "ACCEPT", "proto", "gre", "dport", "22"), "dport", "protocol 'gre' does not support ports"},
		{form("type", "in", "action", "ACCEPT", "proto", "tcp", "dport", "90:80"), "dport", "invalid format - backwards range '90:80' not allowed, did you mean '80:90'?\n"},
		{form("type", "in", "action", "ACCEPT", "source", "+nosuch"), "source", "no such ipset 'nosuch'"},
		{form("type", "in", "action", "ACCEPT", "dest", "nosuch"), "dest", "no such alias 'nosuch'"},
		{form("type", "in", "action", "ACCEPT", "iface", "eth0"), "iface", `value does not match the regex pattern 'net\d+'`},
		{form("type", "in", "action", "ACCEPT", "proto", "icmp", "icmp-type", "neighbor-solicitation"), "icmp-type", "invalid icmp-type 'neighbor-solicitation' for proto 'icmp'"},
	}
	for _, tc := range cases {
		r := c.do(http.MethodPost, fwBase+"/rules", tc.form)
		if r.Status != 400 || r.Errors[tc.key] != tc.want {
			t.Errorf("%v: got %d %v, want %s: %s", tc.form, r.Status, r.Errors, tc.key, tc.want)
		}
	}
	// Built-in IP sets and guest/dc-scoped names resolve.
	mustOK(t, c.do(http.MethodPost, fwBase+"/rules", form("type", "in", "action", "ACCEPT", "source", "+management")), "management")
	mustOK(t, c.do(http.MethodPost, fwBase+"/rules", form("type", "in", "action", "ACCEPT", "source", "+ipfilter-net0")), "ipfilter")
	mustOK(t, c.do(http.MethodPost, fwBase+"/aliases", form("name", "Office", "cidr", "192.0.2.0/24")), "alias")
	mustOK(t, c.do(http.MethodPost, fwBase+"/rules", form("type", "in", "action", "ACCEPT", "source", "office")), "alias any case")
	mustOK(t, c.do(http.MethodPost, fwBase+"/rules", form("type", "in", "action", "ACCEPT", "source", "guest/office")), "guest alias")
	r := c.do(http.MethodPost, fwBase+"/rules", form("type", "in", "action", "ACCEPT", "source", "dc/office"))
	if r.Status != 400 || r.Errors["source"] != "no such alias 'dc/office'" {
		t.Fatalf("dc/ names only the cluster's alias: %d %v", r.Status, r.Errors)
	}
}

func TestFirewallOptionsDigestAndDelete(t *testing.T) {
	c := fwCluster(t)
	r := c.do(http.MethodGet, fwBase+"/options", nil)
	mustOK(t, r, "get")
	var opts map[string]any
	_ = json.Unmarshal(r.Data, &opts)
	digest := opts["digest"].(string)
	mustOK(t, c.do(http.MethodPut, fwBase+"/options", form("enable", "1", "policy_in", "DROP", "digest", digest)), "set")
	wantFail(t, c.do(http.MethodPut, fwBase+"/options", form("enable", "0", "digest", digest)), 500,
		"detected modified configuration - file changed by other user? Try again.\n")
	mustOK(t, c.do(http.MethodPut, fwBase+"/options", form("delete", "policy_in")), "delete")
	r = c.do(http.MethodGet, fwBase+"/options", nil)
	opts = map[string]any{}
	_ = json.Unmarshal(r.Data, &opts)
	if opts["enable"] != float64(1) || opts["policy_in"] != nil {
		t.Fatalf("options %v", opts)
	}
}

func TestFirewallIPSetsWithNomatch(t *testing.T) {
	c := fwCluster(t)
	const base = "/cluster/firewall/ipset"
	mustOK(t, c.do(http.MethodPost, base, form("name", "admins", "comment", "ops")), "create")
	r := c.do(http.MethodPost, base, form("name", "admins"))
	if r.Status != 400 || r.Errors["name"] != "IPSet 'admins' already exists" {
		t.Fatalf("duplicate: %d %v", r.Status, r.Errors)
	}
	mustOK(t, c.do(http.MethodPost, base+"/admins", form("cidr", "10.0.0.0/8")), "add")
	mustOK(t, c.do(http.MethodPost, base+"/admins", form("cidr", "10.1.0.0/16", "nomatch", "1")), "add nomatch")
	r = c.do(http.MethodPost, base+"/admins", form("cidr", "10.0.0.0/8"))
	if r.Status != 400 || r.Errors["cidr"] != "address '10.0.0.0/8' already exists" {
		t.Fatalf("duplicate entry: %d %v", r.Status, r.Errors)
	}
	r = c.do(http.MethodGet, base+"/admins", nil)
	var entries []struct {
		CIDR    string `json:"cidr"`
		NoMatch int    `json:"nomatch"`
	}
	_ = json.Unmarshal(r.Data, &entries)
	if len(entries) != 2 || entries[0].CIDR != "10.1.0.0/16" || entries[0].NoMatch != 1 {
		t.Fatalf("entries %+v", entries)
	}
	wantFail(t, c.do(http.MethodDelete, base+"/admins", nil), 500, "IPSet 'admins' is not empty\n")
	mustOK(t, c.do(http.MethodDelete, base+"/admins/"+url.PathEscape("10.0.0.0/8"), nil), "remove entry")
	mustOK(t, c.do(http.MethodDelete, base+"/admins", form("force", "1")), "force delete")
	mustOK(t, c.do(http.MethodPost, "/nodes/pve1/lxc/200/firewall/rules", form("type", "in", "action", "ACCEPT")), "ct rule")
}

func TestFirewallSecurityGroups(t *testing.T) {
	c := fwCluster(t)
	const base = "/cluster/firewall/groups"
	mustOK(t, c.do(http.MethodPost, base, form("group", "web", "comment", "web servers")), "create")
	r := c.do(http.MethodPost, base, form("group", "web"))
	if r.Status != 400 || r.Errors["group"] != "Security group 'web' already exists" {
		t.Fatalf("duplicate: %d %v", r.Status, r.Errors)
	}
	mustOK(t, c.do(http.MethodPost, base+"/web", form("type", "in", "action", "ACCEPT", "macro", "HTTPS", "enable", "1")), "group rule")
	r = c.do(http.MethodPost, base+"/web", form("type", "group", "action", "other"))
	if r.Status != 400 || r.Errors["type"] != "security groups not allowed" {
		t.Fatalf("nested group: %d %v", r.Status, r.Errors)
	}
	wantFail(t, c.do(http.MethodGet, base+"/nosuch", nil), 500, "no such security group 'nosuch'\n")
	wantFail(t, c.do(http.MethodDelete, base+"/web", nil), 500, "Security group 'web' is not empty\n")
	mustOK(t, c.do(http.MethodPost, fwBase+"/rules", form("type", "group", "action", "web", "iface", "net0")), "use group")
	rules, _ := c.fwRules(base + "/web")
	mustOK(t, c.do(http.MethodDelete, base+"/web/0", form("digest", rules[0].Digest)), "delete group rule")
	mustOK(t, c.do(http.MethodDelete, base+"/web", nil), "delete group")
}

func TestFirewallFileGoesWithTheGuest(t *testing.T) {
	c := fwCluster(t)
	mustOK(t, c.do(http.MethodPost, fwBase+"/rules", form("type", "in", "action", "ACCEPT")), "create")
	wantFail(t, c.do(http.MethodGet, "/nodes/pve1/qemu/999/firewall/rules", nil), 500,
		"Configuration file 'nodes/pve1/qemu-server/999.conf' does not exist\n")
}

// An administrator's request made in process passes the checks any request passes: a valid one changes the
// cluster, a refused one is an error naming the request and PVE's answer, and both are logged.
func TestAnAdministratorsRequestIsCheckedAndLoggedLikeAnyOther(t *testing.T) {
	c := fwCluster(t)
	if err := c.sim.AdminRequest(http.MethodPost, fwBase+"/rules", url.Values{"type": {"in"}, "action": {"ACCEPT"}, "macro": {"ssh"}}); err != nil {
		t.Fatal(err)
	}
	if rules, _ := c.fwRules(fwBase + "/rules"); len(rules) != 1 || rules[0].Macro != "SSH" {
		t.Fatalf("rules after the request: %+v", rules)
	}
	err := c.sim.AdminRequest(http.MethodPost, fwBase+"/rules", url.Values{"type": {"in"}, "action": {"ACCEPT"}, "macro": {"nope"}})
	if err == nil || !strings.Contains(err.Error(), "POST "+fwBase+"/rules: 400") || !strings.Contains(err.Error(), "unknown macro 'nope'") {
		t.Fatalf("refused request: %v", err)
	}
	if n := c.sim.Count(http.MethodPost, "/nodes/{node}/qemu/{vmid}/firewall/rules"); n != 2 {
		t.Errorf("%d requests logged, want 2", n)
	}
}
