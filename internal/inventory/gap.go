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

// GapReport lists every gap of a cluster, sorted and deduplicated.
type GapReport struct {
	Cluster string
	Gaps    []Gap
}

// Normalize sorts the report's gaps and removes duplicates.
func (r *GapReport) Normalize() {
	slices.SortFunc(r.Gaps, CompareGaps)
	r.Gaps = slices.Compact(r.Gaps)
}
