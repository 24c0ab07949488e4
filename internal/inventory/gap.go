package inventory

import (
	"cmp"
	"slices"
)

// Gap is one live config key that the manifest model does not cover: reported, never dropped silently.
type Gap struct {
	// Kind is the manifest kind the guest maps to (VM, TemplateVM, LXC, TemplateCT).
	Kind string
	// Name is the manifest name of the guest (declared, or the name adoption would give it).
	Name string
	Node string
	VMID int
	Key  string
	// Value is the live value; secret-looking values are redacted.
	Value string
	Note  string
	// Managed: the guest is declared in git.
	Managed bool
}

// CompareGaps orders gaps by node, vmid, key, then the remaining fields.
func CompareGaps(a, b Gap) int {
	return cmp.Or(
		cmp.Compare(a.Node, b.Node),
		cmp.Compare(a.VMID, b.VMID),
		cmp.Compare(a.Key, b.Key),
		cmp.Compare(a.Kind, b.Kind),
		cmp.Compare(a.Name, b.Name),
		cmp.Compare(a.Value, b.Value),
		cmp.Compare(a.Note, b.Note),
	)
}

// GapReport lists every gap of a cluster, and every live setting that weakens a guest's isolation, each
// sorted and deduplicated.
type GapReport struct {
	Cluster  string
	Gaps     []Gap
	Security []SecurityWarning
}

// Normalize sorts the report's gaps and security warnings and removes duplicates.
func (r *GapReport) Normalize() {
	slices.SortFunc(r.Gaps, CompareGaps)
	r.Gaps = slices.Compact(r.Gaps)
	slices.SortFunc(r.Security, CompareSecurityWarnings)
	r.Security = slices.Compact(r.Security)
}

// SecurityWarning is a live setting of a guest that weakens its isolation from the host (an unconfined
// AppArmor profile, device allows, raw QEMU arguments, ...), whether the model covers the key or not.
type SecurityWarning struct {
	// Kind and Name are the guest's manifest kind and name, as for a Gap.
	Kind string
	Name string
	Node string
	VMID int
	Key  string
	// Value is the live value; secret-looking values are redacted.
	Value string
	// Why says how the setting weakens isolation.
	Why string
	// Managed: the guest is declared in git.
	Managed bool
}

// CompareSecurityWarnings orders security warnings by node, vmid, key, then the remaining fields.
func CompareSecurityWarnings(a, b SecurityWarning) int {
	return cmp.Or(
		cmp.Compare(a.Node, b.Node),
		cmp.Compare(a.VMID, b.VMID),
		cmp.Compare(a.Key, b.Key),
		cmp.Compare(a.Value, b.Value),
		cmp.Compare(a.Kind, b.Kind),
		cmp.Compare(a.Name, b.Name),
		cmp.Compare(a.Why, b.Why),
	)
}
