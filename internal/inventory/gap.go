package inventory

import (
	"cmp"
	"slices"
)

// Setting is one live config key of a guest: where the guest stands, what the manifests call it, and the
// key's value.
type Setting struct {
	// Kind is the manifest kind the guest maps to (VM, TemplateVM, LXC, TemplateCT).
	Kind string
	// Name is the manifest name of the guest (declared, or the name adoption would give it).
	Name string
	Node string
	VMID int
	Key  string
	// Value is the live value; secret-looking values are redacted.
	Value string
}

// CompareSettings orders settings by node, vmid, key, kind, name, then value.
func CompareSettings(a, b Setting) int {
	return cmp.Or(
		cmp.Compare(a.Node, b.Node),
		cmp.Compare(a.VMID, b.VMID),
		cmp.Compare(a.Key, b.Key),
		cmp.Compare(a.Kind, b.Kind),
		cmp.Compare(a.Name, b.Name),
		cmp.Compare(a.Value, b.Value),
	)
}

// Gap is one live config key that the manifest model does not cover: reported, never dropped silently.
type Gap struct {
	Setting
	Note string
	// Managed: the guest is declared in git.
	Managed bool
}

// CompareGaps orders gaps like CompareSettings, then by note.
func CompareGaps(a, b Gap) int {
	return cmp.Or(CompareSettings(a.Setting, b.Setting), cmp.Compare(a.Note, b.Note))
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
	Setting
	// Why says how the setting weakens isolation.
	Why string
	// Managed: the guest is declared in git.
	Managed bool
}

// CompareSecurityWarnings orders security warnings like CompareSettings, then by why.
func CompareSecurityWarnings(a, b SecurityWarning) int {
	return cmp.Or(CompareSettings(a.Setting, b.Setting), cmp.Compare(a.Why, b.Why))
}
