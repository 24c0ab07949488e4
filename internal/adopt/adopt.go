// Package adopt turns the live objects of a cluster (guests and the files on its storages) into manifests
// that, once committed, plan to nothing but the one-time claim of the ownership tag. Every live setting the
// manifest model does not cover becomes an explicit gap; a manifest that cannot be completed from what PVE
// reports is INCOMPLETE, with the reason, and is left out of the suggested composition; a config PVE itself
// refuses is skipped. It is pure: an observed cluster and the repository's state in, manifests and a report
// out, deterministic to the byte.
package adopt

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/proxops/proxops/internal/inventory"
	"github.com/proxops/proxops/internal/manifest"
	"github.com/proxops/proxops/internal/pvewire"
)

// KeyStore is what adoption needs of a cluster's secrets file to turn live SSH keys into ssh-key-refs: the
// references of its cloud-init.ssh-keys entries and the digest (inventory.SSHKeysDigest) of the keys a set
// of references resolves to. No key is ever handed over.
type KeyStore interface {
	// SSHKeyRefs lists every cloud-init.ssh-keys.<name> reference of the store, sorted.
	SSHKeyRefs() []string
	// SSHKeysDigest returns the digest of the keys the references resolve to.
	SSHKeysDigest(refs []string) (string, error)
}

// Input is everything one cluster's adoption reads.
type Input struct {
	Cluster string
	// Observed holds the cluster's allowed nodes, each with the content of all its storages listed.
	Observed inventory.Cluster
	// Declared are the resources the cluster's composition declares in files an operator wrote (not files
	// adoption wrote): their guests are not adopted again, their artifacts are referenced by name, and their
	// names are not given out.
	Declared []*manifest.Resource
	// Occupied are the slash-separated paths of files under the kind roots that adoption did not write;
	// adoption never writes to them.
	Occupied []string
	// Templates are the CTTemplate names operators gave containers (by vmid) in files adoption wrote before:
	// PVE does not report a container's template, so only an operator can name it.
	Templates map[int]string
	// Keys is the cluster's secrets file; nil when the cluster has none.
	Keys KeyStore
	// Adopted are the files adoption wrote for the cluster before; one it does not write again is reported.
	Adopted []string
	// ClusterFirewallManaged says the cluster's config manages its own firewall (firewall.manage-cluster):
	// adoption then offers no declaration of it.
	ClusterFirewallManaged bool
}

// Result is a cluster's adoption.
type Result struct {
	Cluster string
	// Nodes are the observed nodes, sorted.
	Nodes []string
	// Manifests are every file adoption writes, complete and INCOMPLETE, sorted by path.
	Manifests []Manifest
	// Skipped are live objects adoption did not turn into a manifest, with the reason.
	Skipped []Skipped
	// Gaps are the live settings of the adopted objects that the manifests do not carry, sorted.
	Gaps []inventory.Gap
	// Warnings do not stop anything but deserve a look.
	Warnings []string
	Census   Census
	// ClusterFirewall is the firewall: block to add under pve.clusters.<name> in the cluster's config.yaml
	// to manage its own firewall as it is live; empty when the config manages it already, when it is PVE's
	// default, or when a rule the model cannot carry is a gap.
	ClusterFirewall []byte
}

// Manifest is one file adoption writes.
type Manifest struct {
	// Path is <kind root>/<cluster>/<name>.yaml.
	Path string
	Kind manifest.Kind
	Name string
	// Resource is the manifest as built (nil when the result came over the wire: Content is the file).
	Resource *manifest.Resource
	// Node and VMID name the guest it was adopted from; Volid the file (artifacts, with Node the first node
	// holding it).
	Node  string
	VMID  int
	Volid string
	// Incomplete lists why the manifest cannot be used as it is; empty for a complete manifest.
	Incomplete []string
	// Content is the rendered file.
	Content []byte
}

// Complete reports whether the manifest can be listed in the composition as it is.
func (m Manifest) Complete() bool { return len(m.Incomplete) == 0 }

// Skipped is a live object adoption left alone.
type Skipped struct {
	Kind manifest.Kind
	Node string
	VMID int
	// Volid names a storage file.
	Volid string
	// Refused: PVE itself refuses the config (it cannot start the guest as it is).
	Refused bool
	Reason  string
}

// Census counts the cloud-init secrets adoption met: SSH keys become ssh-key-refs when every key of a guest
// is in the cluster's secrets file, else they stay PVE's (ssh-keys: ["*"]); passwords are only counted.
type Census struct {
	// SSHKeyGuests have SSH keys; SSHKeySets is the number of distinct key sets among them.
	SSHKeyGuests int
	SSHKeySets   int
	// SSHKeyRefs guests got ssh-key-refs; SSHKeysPVE guests keep their keys on PVE.
	SSHKeyRefs int
	SSHKeysPVE int
	// Passwords is the number of guests with a cloud-init password, which adoption never carries.
	Passwords int
}

// Composition lists the resources.yaml entries of the complete manifests (../../<path>), sorted.
func (r Result) Composition() []string {
	var out []string
	for _, m := range r.Manifests {
		if m.Complete() {
			out = append(out, "../../"+m.Path)
		}
	}
	return out
}

// Incomplete returns the INCOMPLETE manifests.
func (r Result) Incomplete() []Manifest {
	var out []Manifest
	for _, m := range r.Manifests {
		if !m.Complete() {
			out = append(out, m)
		}
	}
	return out
}

// PlaceholderURL is the download URL adoption writes for a file: PVE does not record where it came from.
func PlaceholderURL(storage, filename string) string {
	return "https://placeholder.invalid/" + storage + "/" + filename
}

// artifactKey locates a file on a node.
type artifactKey struct {
	kind  manifest.Kind
	node  string
	volid string
}

type run struct {
	in       Input
	res      Result
	nodes    []inventory.Node
	declared map[int]*manifest.Resource
	// artifacts maps a file on a node to the manifest (adopted or declared) that places it there.
	artifacts map[artifactKey]string
	lookup    map[manifest.Ref]*manifest.Resource
	namers    map[manifest.Kind]*namer
	keys      *keyMatcher
	ciDigests map[string]bool
	// poolOf is the live pool of each guest (pool.go).
	poolOf map[int]string
	// haNames are the guests with spec.ha (adopted or declared) by HA resource id (ha.go).
	haNames map[string]manifest.Ref
}

// Adopt turns a cluster's live guests and storage files into manifests.
func Adopt(in Input) (Result, error) {
	r := &run{in: in, res: Result{Cluster: in.Cluster}, declared: map[int]*manifest.Resource{},
		artifacts: map[artifactKey]string{}, lookup: map[manifest.Ref]*manifest.Resource{},
		namers: map[manifest.Kind]*namer{}, keys: newKeyMatcher(in.Keys), ciDigests: map[string]bool{},
		haNames: map[string]manifest.Ref{}}
	r.nodes = slices.Clone(in.Observed.Nodes)
	slices.SortFunc(r.nodes, func(a, b inventory.Node) int { return cmp.Compare(a.Node, b.Node) })
	for i := range r.nodes {
		n := &r.nodes[i]
		n.Guests, n.Storages, n.Volumes = slices.Clone(n.Guests), slices.Clone(n.Storages), slices.Clone(n.Volumes)
		n.ListedStorages = slices.Clone(n.ListedStorages)
		n.Sort()
		r.res.Nodes = append(r.res.Nodes, n.Node)
	}
	occupied := map[string]bool{}
	for _, p := range in.Occupied {
		occupied[p] = true
	}
	for _, k := range manifest.Kinds {
		r.namers[k] = &namer{kind: k, cluster: in.Cluster, taken: map[string]bool{}, occupied: occupied}
	}
	r.indexDeclared()
	if err := r.adoptPools(); err != nil {
		return Result{}, err
	}
	if err := r.adoptFirewallObjects(); err != nil {
		return Result{}, err
	}
	if err := r.adoptClusterFirewall(); err != nil {
		return Result{}, err
	}
	if err := r.adoptArtifacts(); err != nil {
		return Result{}, err
	}
	if err := r.adoptGuests(); err != nil {
		return Result{}, err
	}
	if err := r.adoptBackupJobs(); err != nil {
		return Result{}, err
	}
	if err := r.adoptHARules(); err != nil {
		return Result{}, err
	}
	slices.SortFunc(r.res.Manifests, func(a, b Manifest) int { return cmp.Compare(a.Path, b.Path) })
	written := map[string]bool{}
	for _, m := range r.res.Manifests {
		written[m.Path] = true
	}
	for _, p := range in.Adopted {
		if !written[p] {
			r.warn("%s was adopted earlier and nothing live maps to it any more (gone, renamed, or now declared elsewhere): delete it and its composition entry if it is not needed", p)
		}
	}
	slices.SortFunc(r.res.Skipped, func(a, b Skipped) int {
		return cmp.Or(cmp.Compare(a.Node, b.Node), cmp.Compare(a.VMID, b.VMID), cmp.Compare(a.Volid, b.Volid),
			cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Reason, b.Reason))
	})
	rep := inventory.GapReport{Cluster: in.Cluster, Gaps: r.res.Gaps}
	rep.Normalize()
	r.res.Gaps = rep.Gaps
	slices.Sort(r.res.Warnings)
	r.res.Warnings = slices.Compact(r.res.Warnings)
	r.res.Census.SSHKeySets = len(r.ciDigests)
	return r.res, nil
}

// indexDeclared records the declared guests by vmid, the declared names, and where declared artifacts are.
func (r *run) indexDeclared() {
	decl := slices.Clone(r.in.Declared)
	slices.SortFunc(decl, func(a, b *manifest.Resource) int { return manifest.CompareRefs(a.Ref(), b.Ref()) })
	for _, d := range decl {
		res := manifest.Resolve(d)
		r.namers[d.Kind].taken[d.Metadata.Name] = true
		r.lookup[d.Ref()] = res
		if d.Kind.IsGuest() {
			if _, dup := r.declared[d.VMID()]; !dup {
				r.declared[d.VMID()] = d
			}
			continue
		}
		if a := res.Artifact(); a != nil {
			volid := pvewire.ArtifactVolid(res)
			for _, n := range a.Nodes {
				k := artifactKey{kind: d.Kind, node: n, volid: volid}
				if _, dup := r.artifacts[k]; !dup {
					r.artifacts[k] = d.Metadata.Name
				}
			}
		}
	}
}

func (r *run) skip(s Skipped) { r.res.Skipped = append(r.res.Skipped, s) }

func (r *run) warn(format string, args ...any) {
	r.res.Warnings = append(r.res.Warnings, fmt.Sprintf(format, args...))
}

// volume finds a storage content entry by volid, on the node or (shared storage) on any node.
func (r *run) volume(node, volid string) (inventory.Volume, bool) {
	find := func(n *inventory.Node) (inventory.Volume, bool) {
		i, ok := slices.BinarySearchFunc(n.Volumes, volid, func(v inventory.Volume, id string) int { return cmp.Compare(v.Volid, id) })
		if !ok {
			return inventory.Volume{}, false
		}
		return n.Volumes[i], true
	}
	for i := range r.nodes {
		if r.nodes[i].Node == node {
			if v, ok := find(&r.nodes[i]); ok {
				return v, true
			}
		}
	}
	for i := range r.nodes {
		if v, ok := find(&r.nodes[i]); ok {
			if st, found := r.nodes[i].Storage(v.Storage); found && st.Shared {
				return v, true
			}
		}
	}
	return inventory.Volume{}, false
}

// header is the comment block of an adopted file.
func header(cluster, from string, incomplete []string) []string {
	h := []string{
		"Adopted by proxops from " + cluster + " " + from + ".",
		"proxops adopt rewrites this file; delete these first lines to make it yours.",
	}
	for _, why := range incomplete {
		h = append(h, "INCOMPLETE: "+why)
	}
	return h
}

// emit renders and records a manifest.
func (r *run) emit(m Manifest, from string) error {
	content, err := Render(m.Resource, header(r.in.Cluster, from, m.Incomplete))
	if err != nil {
		return err
	}
	m.Content = content
	m.Kind, m.Name = m.Resource.Kind, m.Resource.Metadata.Name
	r.res.Manifests = append(r.res.Manifests, m)
	return nil
}

func itoa(n int) string { return strconv.Itoa(n) }

// indexedKeys lists the keys prefix<N> of a config, by N.
func indexedKeys(cfg map[string]string, prefixes ...string) []string {
	type slot struct {
		key    string
		prefix int
		n      int
	}
	var slots []slot
	for k := range cfg {
		for i, p := range prefixes {
			rest, ok := strings.CutPrefix(k, p)
			if !ok || rest == "" {
				continue
			}
			n, err := strconv.Atoi(rest)
			if err != nil || n < 0 || strconv.Itoa(n) != rest {
				continue
			}
			slots = append(slots, slot{key: k, prefix: i, n: n})
		}
	}
	slices.SortFunc(slots, func(a, b slot) int { return cmp.Or(cmp.Compare(a.prefix, b.prefix), cmp.Compare(a.n, b.n)) })
	out := make([]string, len(slots))
	for i, s := range slots {
		out[i] = s.key
	}
	return out
}

// sortedStrings returns s sorted and without duplicates.
func sortedStrings(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	return slices.Compact(out)
}
