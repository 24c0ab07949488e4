package render

// An adoption as `proxops adopt` reports it: the predecessor's "adopt: ..." lines as text, and a JSON
// document with a stable field order (docs/adopt.md documents both).

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/proxops/proxops/internal/adopt"
	"github.com/proxops/proxops/internal/inventory"
	"github.com/proxops/proxops/internal/manifest"
)

// Adoption is one cluster's adoption and what the command did with it.
type Adoption struct {
	Result adopt.Result
	// CompositionFile is the cluster's resources.yaml, relative to the repository root.
	CompositionFile string
	// ConfigFile is the cluster's config.yaml, relative to the repository root.
	ConfigFile string
	// Missing are the composition entries of complete manifests the file does not list yet, sorted.
	Missing []string
	// Updated: the command appended Missing to the composition file (--update-resources).
	Updated bool
}

// AdoptionText renders an adoption the way the predecessor printed it.
func AdoptionText(a Adoption) string {
	r := a.Result
	var b strings.Builder
	line := func(format string, args ...any) {
		b.WriteString("adopt: ")
		fmt.Fprintf(&b, format, args...)
		b.WriteByte('\n')
	}
	line("cluster %s (read-only)", r.Cluster)
	for _, m := range r.Manifests {
		line("wrote %s (%s)", m.Path, m.Kind)
	}
	for _, g := range r.Gaps {
		line("gap %s: %s=%s — %s", gapObject(g), g.Key, oneLine(g.Value), g.Note)
	}
	for _, w := range r.Warnings {
		line("warning: %s", w)
	}
	if inc := r.Incomplete(); len(inc) > 0 {
		line("INCOMPLETE (%d): fill in what is missing, delete the header lines, then list the file in %s:", len(inc), a.CompositionFile)
		for _, m := range inc {
			for _, why := range m.Incomplete {
				fmt.Fprintf(&b, "  %s: %s\n", m.Path, why)
			}
		}
	}
	if len(r.Skipped) > 0 {
		line("SKIPPED LIVE OBJECTS (%d):", len(r.Skipped))
		for _, s := range r.Skipped {
			fmt.Fprintf(&b, "  %s: %s\n", skippedObject(s), s.Reason)
		}
	}
	switch {
	case len(a.Missing) == 0 && len(r.Composition()) > 0:
		line("%s already lists every complete manifest", a.CompositionFile)
	case len(a.Missing) == 0:
	case a.Updated:
		entries := "entries"
		if len(a.Missing) == 1 {
			entries = "entry"
		}
		line("added %d %s to %s:", len(a.Missing), entries, a.CompositionFile)
		for _, p := range a.Missing {
			fmt.Fprintf(&b, "  - %s\n", p)
		}
	default:
		line("add these lines to %s:", a.CompositionFile)
		b.WriteString("  resources:\n")
		for _, p := range a.Missing {
			fmt.Fprintf(&b, "  - %s\n", p)
		}
	}
	if len(r.ClusterFirewall) > 0 {
		line("the cluster's own firewall is not managed by ProxOps; to manage it as it is, add under pve.clusters.%s in %s:", r.Cluster, a.ConfigFile)
		for l := range strings.SplitSeq(strings.TrimRight(string(r.ClusterFirewall), "\n"), "\n") {
			fmt.Fprintf(&b, "  %s\n", l)
		}
	}
	c := r.Census
	if c.SSHKeyGuests > 0 {
		line("cloud-init: SSH keys on %s (%s): %d as ssh-key-refs, %d left to PVE (ssh-keys: [\"*\"])",
			count(c.SSHKeyGuests, "guest"), count(c.SSHKeySets, "distinct key set"), c.SSHKeyRefs, c.SSHKeysPVE)
	}
	if c.Passwords > 0 {
		line("cloud-init: passwords on %s are never adopted; PVE keeps them (declare ci-password-ref to own one)", count(c.Passwords, "guest"))
	}
	if len(r.Gaps) > 0 {
		line("warning: %s: live settings the manifests do not carry; ProxOps leaves them as PVE has them (see docs/gaps.md)", count(len(r.Gaps), "gap"))
	}
	g := guestOutcomes(r)
	fmt.Fprintf(&b, "  guests: %d complete, %d incomplete, %d refused\n", g.Complete, g.Incomplete, g.Refused)
	fmt.Fprintf(&b, "  nodes: [%s]\n", strings.Join(r.Nodes, " "))
	fmt.Fprintf(&b, "  artifacts: %s\n", artifactCounts(r))
	return b.String()
}

// GuestOutcomesJSON counts the adopted guests by outcome: complete (planned with nothing but the claim, and
// the name of a guest that has none), incomplete (written, but a person must finish it) and refused (PVE
// itself refuses the config; no manifest).
type GuestOutcomesJSON struct {
	Complete   int `json:"complete"`
	Incomplete int `json:"incomplete"`
	Refused    int `json:"refused"`
}

func guestOutcomes(r adopt.Result) GuestOutcomesJSON {
	var g GuestOutcomesJSON
	for _, m := range r.Manifests {
		switch {
		case m.VMID == 0:
		case m.Complete():
			g.Complete++
		default:
			g.Incomplete++
		}
	}
	for _, s := range r.Skipped {
		if s.Refused && s.VMID != 0 {
			g.Refused++
		}
	}
	return g
}

// gapObject names what a gap is about: <Kind> on <node>#<vmid> for a guest, <Kind>/<name> on <node> for a
// file, <Kind>/<name> for a cluster object.
func gapObject(g inventory.Gap) string {
	if g.Node == "" {
		return g.Kind + "/" + g.Name
	}
	if g.VMID == 0 {
		return g.Kind + "/" + g.Name + " on " + g.Node
	}
	return g.Kind + " on " + g.Node + "#" + strconv.Itoa(g.VMID)
}

func skippedObject(s adopt.Skipped) string {
	if s.VMID == 0 {
		return string(s.Kind) + " " + s.Volid + " on " + s.Node
	}
	return string(s.Kind) + " on " + s.Node + "#" + strconv.Itoa(s.VMID)
}

// artifactCounts counts the adopted files by kind: "2 ISOs, 1 CTTemplate, 0 DiskImages".
func artifactCounts(r adopt.Result) string {
	n := map[manifest.Kind]int{}
	for _, m := range r.Manifests {
		n[m.Kind]++
	}
	var parts []string
	for _, k := range []manifest.Kind{manifest.KindISO, manifest.KindCTTemplate, manifest.KindDiskImage} {
		parts = append(parts, count(n[k], string(k)))
	}
	return strings.Join(parts, ", ")
}

// AdoptionJSON is the document `proxops adopt --output json` prints.
type AdoptionJSON struct {
	Cluster   string        `json:"cluster"`
	ReadOnly  bool          `json:"read_only"`
	Nodes     []string      `json:"nodes"`
	Manifests []AdoptedJSON `json:"manifests"`
	Gaps      []GapJSON     `json:"gaps"`
	Skipped   []SkippedJSON `json:"skipped"`
	Warnings  []string      `json:"warnings"`
	// Guests counts the guests by outcome; Refused lists the guests PVE refuses (also in Skipped).
	Guests      GuestOutcomesJSON `json:"guests"`
	Refused     []SkippedJSON     `json:"refused"`
	Composition CompositionJSON   `json:"composition"`
	Census      adoptionCensusDoc `json:"cloud_init"`
	// ClusterFirewall is the block that declares the cluster's own firewall as it is live; null when there
	// is none to offer.
	ClusterFirewall *ClusterFirewallJSON `json:"cluster_firewall"`
}

// ClusterFirewallJSON is where to add the declaration of the cluster's own firewall, and the block.
type ClusterFirewallJSON struct {
	File  string `json:"file"`
	Under string `json:"under"`
	YAML  string `json:"yaml"`
}

// AdoptedJSON is one file adoption wrote.
type AdoptedJSON struct {
	Path       string   `json:"path"`
	Kind       string   `json:"kind"`
	Name       string   `json:"name"`
	Node       string   `json:"node"`
	VMID       int      `json:"vmid,omitempty"`
	Volid      string   `json:"volid,omitempty"`
	Complete   bool     `json:"complete"`
	Incomplete []string `json:"incomplete,omitempty"`
}

// GapJSON is one live setting a manifest does not carry.
type GapJSON struct {
	Kind  string `json:"kind"`
	Name  string `json:"name"`
	Node  string `json:"node"`
	VMID  int    `json:"vmid,omitempty"`
	Key   string `json:"key"`
	Value string `json:"value"`
	Note  string `json:"note"`
}

// SkippedJSON is one live object adoption left alone.
type SkippedJSON struct {
	Kind    string `json:"kind"`
	Node    string `json:"node"`
	VMID    int    `json:"vmid,omitempty"`
	Volid   string `json:"volid,omitempty"`
	Refused bool   `json:"refused"`
	Reason  string `json:"reason"`
}

// CompositionJSON says which composition entries are missing and whether they were added.
type CompositionJSON struct {
	File    string   `json:"file"`
	Entries []string `json:"entries"`
	Missing []string `json:"missing"`
	Updated bool     `json:"updated"`
}

type adoptionCensusDoc struct {
	SSHKeyGuests int `json:"ssh_key_guests"`
	SSHKeySets   int `json:"ssh_key_sets"`
	SSHKeyRefs   int `json:"ssh_key_refs"`
	SSHKeysPVE   int `json:"ssh_keys_left_to_pve"`
	Passwords    int `json:"password_guests"`
}

// NewAdoptionJSON converts an adoption into its JSON document.
func NewAdoptionJSON(a Adoption) AdoptionJSON {
	r := a.Result
	doc := AdoptionJSON{Cluster: r.Cluster, ReadOnly: true, Nodes: nonNil(r.Nodes), Manifests: []AdoptedJSON{},
		Gaps: []GapJSON{}, Skipped: []SkippedJSON{}, Warnings: nonNil(r.Warnings), Guests: guestOutcomes(r), Refused: []SkippedJSON{},
		Composition: CompositionJSON{File: a.CompositionFile, Entries: nonNil(r.Composition()), Missing: nonNil(a.Missing), Updated: a.Updated},
		Census: adoptionCensusDoc{SSHKeyGuests: r.Census.SSHKeyGuests, SSHKeySets: r.Census.SSHKeySets,
			SSHKeyRefs: r.Census.SSHKeyRefs, SSHKeysPVE: r.Census.SSHKeysPVE, Passwords: r.Census.Passwords}}
	if len(r.ClusterFirewall) > 0 {
		doc.ClusterFirewall = &ClusterFirewallJSON{File: a.ConfigFile, Under: "pve.clusters." + r.Cluster, YAML: string(r.ClusterFirewall)}
	}
	for _, m := range r.Manifests {
		doc.Manifests = append(doc.Manifests, AdoptedJSON{Path: m.Path, Kind: string(m.Kind), Name: m.Name,
			Node: m.Node, VMID: m.VMID, Volid: m.Volid, Complete: m.Complete(), Incomplete: m.Incomplete})
	}
	for _, g := range r.Gaps {
		doc.Gaps = append(doc.Gaps, GapJSON{Kind: g.Kind, Name: g.Name, Node: g.Node, VMID: g.VMID, Key: g.Key, Value: g.Value, Note: g.Note})
	}
	for _, s := range r.Skipped {
		sj := SkippedJSON{Kind: string(s.Kind), Node: s.Node, VMID: s.VMID, Volid: s.Volid, Refused: s.Refused, Reason: s.Reason}
		doc.Skipped = append(doc.Skipped, sj)
		if s.Refused && s.VMID != 0 {
			doc.Refused = append(doc.Refused, sj)
		}
	}
	return doc
}

// AdoptionJSONBytes renders an adoption as an indented JSON document ending in a newline.
func AdoptionJSONBytes(a Adoption) ([]byte, error) { return marshal(NewAdoptionJSON(a)) }

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
