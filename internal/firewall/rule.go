// Package firewall is the PVE firewall's model without I/O: a rule as PVE keeps it, the fewest position
// edits that turn a live rule list into a declared one (with PVE's own semantics of create, update, moveto
// and delete), and the check of whether a firewall configuration could lock people out.
package firewall

import (
	"maps"
	"slices"
	"strings"
)

// Rule is one firewall rule as PVE's rules endpoints carry it. Empty strings are unset properties.
type Rule struct {
	Type     string // in, out, forward or group
	Action   string // ACCEPT, DROP, REJECT, or the security group's name for a group rule
	Macro    string
	Source   string
	Dest     string
	Proto    string
	DPort    string
	SPort    string
	ICMPType string
	Iface    string
	Log      string
	Comment  string
	Enable   bool
}

// fieldKeys are the PVE property names of a rule's fields, in the order Fields lists them.
var fieldKeys = []string{"type", "action", "macro", "source", "dest", "proto", "dport", "sport", "icmp-type",
	"iface", "log", "comment", "enable"}

// Keys lists the PVE property names a rule can carry.
func Keys() []string { return slices.Clone(fieldKeys) }

// Fields is the rule as PVE parameters: every set property, and enable as 0 or 1 (PVE disables a rule
// created without it).
func (r Rule) Fields() map[string]string {
	m := map[string]string{}
	set := func(k, v string) {
		if v != "" {
			m[k] = v
		}
	}
	set("type", r.Type)
	set("action", r.Action)
	set("macro", r.Macro)
	set("source", r.Source)
	set("dest", r.Dest)
	set("proto", r.Proto)
	set("dport", r.DPort)
	set("sport", r.SPort)
	set("icmp-type", r.ICMPType)
	set("iface", r.Iface)
	set("log", r.Log)
	set("comment", r.Comment)
	m["enable"] = "0"
	if r.Enable {
		m["enable"] = "1"
	}
	return m
}

// RuleFromFields reads a rule from PVE's properties (as GET …/rules returns them, values as text); keys it
// does not model (pos, digest, ipversion) are ignored.
func RuleFromFields(m map[string]string) Rule {
	return Rule{Type: m["type"], Action: m["action"], Macro: m["macro"], Source: m["source"], Dest: m["dest"],
		Proto: m["proto"], DPort: m["dport"], SPort: m["sport"], ICMPType: m["icmp-type"], Iface: m["iface"],
		Log: m["log"], Comment: m["comment"], Enable: m["enable"] == "1"}
}

// UpdateParams are the parameters of an in-place update from one rule to another: every property of the
// new rule, and delete= for those only the old one has. It returns the set values and the deleted keys.
func UpdateParams(from, to Rule) (map[string]string, []string) {
	f, t := from.Fields(), to.Fields()
	var del []string
	for _, k := range slices.Sorted(maps.Keys(f)) {
		if _, ok := t[k]; !ok {
			del = append(del, k)
		}
	}
	return t, del
}

// String is a one-line rendering for plans and logs: "in ACCEPT -p tcp -dport 22 (ssh)".
func (r Rule) String() string {
	var b strings.Builder
	if !r.Enable {
		b.WriteString("|")
	}
	b.WriteString(r.Type)
	b.WriteString(" ")
	if r.Macro != "" {
		b.WriteString(r.Macro + "(" + r.Action + ")")
	} else {
		b.WriteString(r.Action)
	}
	for _, kv := range [][2]string{{"-i", r.Iface}, {"-source", r.Source}, {"-dest", r.Dest}, {"-p", r.Proto},
		{"-dport", r.DPort}, {"-sport", r.SPort}, {"-icmp-type", r.ICMPType}, {"-log", r.Log}} {
		if kv[1] != "" {
			b.WriteString(" " + kv[0] + " " + kv[1])
		}
	}
	if r.Comment != "" {
		b.WriteString(" # " + r.Comment)
	}
	return b.String()
}
