package firewall

import (
	"testing"
)

func TestCompareNamesEachDifferingRuleOnce(t *testing.T) {
	ssh := Rule{Type: "in", Action: "ACCEPT", Macro: "SSH", Enable: true}
	web := Rule{Type: "in", Action: "ACCEPT", Proto: "tcp", DPort: "80", Enable: true}
	web2 := Rule{Type: "in", Action: "ACCEPT", Proto: "tcp", DPort: "8080", Enable: true}
	drop := Rule{Type: "in", Action: "DROP", Source: "+blacklist", Enable: true}
	smtp := Rule{Type: "in", Action: "ACCEPT", Proto: "tcp", DPort: "25", Enable: true}
	https := Rule{Type: "in", Action: "ACCEPT", Proto: "tcp", DPort: "443", Enable: true}
	ping := Rule{Type: "in", Action: "ACCEPT", Macro: "Ping", Enable: true}
	live := []Rule{ssh, ping, web, smtp, drop}
	declared := []Rule{drop, ssh, ping, web2, https}
	got := Compare(live, declared)
	want := []RuleChange{
		{Kind: Moved, From: 4, To: 0, Before: drop, After: drop},
		{Kind: Changed, From: 2, To: 3, Before: web, After: web2},
		{Kind: Changed, From: 3, To: 4, Before: smtp, After: https},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d changes %+v, want %+v", len(got), got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("change %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
	got = Compare([]Rule{ssh, smtp, web}, []Rule{https, ssh, web})
	want = []RuleChange{
		{Kind: Removed, From: 1, To: -1, Before: smtp},
		{Kind: Added, From: -1, To: 0, After: https},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d changes %+v, want %+v", len(got), got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("change %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
	if c := Compare(declared, declared); len(c) != 0 {
		t.Errorf("equal lists: got %+v", c)
	}
}
