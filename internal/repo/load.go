// Package repo reads a ProxOps repository from a file system (a work tree, or a snapshot of a git tree):
// the optional proxops.yaml, every clusters/<name>/config.yaml and resources.yaml, and the manifests each
// composition lists. It checks every repository invariant and returns each cluster's resources, dependency
// graph and diagnostics. A problem in one cluster never hides the others; a repository-wide problem fails
// every cluster. It is pure apart from Discover: it reads only the fs.FS it is given.
package repo

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"runtime"
	"slices"
	"strings"
	"sync"

	"github.com/proxops/proxops/internal/diag"
	"github.com/proxops/proxops/internal/graph"
	"github.com/proxops/proxops/internal/manifest"
	"github.com/proxops/proxops/internal/yamldecode"
)

// File names of a repository.
const (
	ProcessConfigFile = "proxops.yaml"
	ClustersDir       = "clusters"
	ClusterConfigFile = "config.yaml"
	CompositionFile   = "resources.yaml"
)

// Repository is everything read from a repository.
type Repository struct {
	// Config is the process configuration: proxops.yaml over the built-in defaults.
	Config *Config
	// Clusters are sorted by name: every cluster that has a configuration or a composition.
	Clusters []*Cluster
	// Diagnostics are the repository-wide problems; any error among them fails every cluster.
	Diagnostics diag.List
}

// Cluster is one cluster's desired state.
type Cluster struct {
	Name string
	// Config is the cluster's pve.clusters entry; nil when the cluster has a composition but no entry.
	Config *ClusterConfig
	// Files are the manifest files the composition lists, sorted.
	Files []string
	// Resources are the composed resources sorted by kind, then name; a duplicate is left out.
	Resources []*manifest.Resource
	// Graph holds the resources and their dependencies.
	Graph *graph.Graph
	// Diagnostics are this cluster's own problems (see Repository.ClusterDiagnostics for all that apply).
	Diagnostics diag.List
}

// Resource returns the cluster's resource with a ref, or nil.
func (c *Cluster) Resource(ref manifest.Ref) *manifest.Resource {
	i, ok := slices.BinarySearchFunc(c.Resources, ref, func(r *manifest.Resource, ref manifest.Ref) int {
		return manifest.CompareRefs(r.Ref(), ref)
	})
	if !ok {
		return nil
	}
	return c.Resources[i]
}

// Cluster returns the cluster with a name, or nil.
func (r *Repository) Cluster(name string) *Cluster {
	i, ok := slices.BinarySearchFunc(r.Clusters, name, func(c *Cluster, n string) int { return strings.Compare(c.Name, n) })
	if !ok {
		return nil
	}
	return r.Clusters[i]
}

// ClusterNames lists the clusters' names, sorted.
func (r *Repository) ClusterNames() []string {
	out := make([]string, len(r.Clusters))
	for i, c := range r.Clusters {
		out[i] = c.Name
	}
	return out
}

// ClusterDiagnostics returns every diagnostic that applies to a cluster (the repository-wide ones and its
// own), sorted. An error among them means the cluster must not be planned.
func (r *Repository) ClusterDiagnostics(name string) diag.List {
	all := slices.Clone(r.Diagnostics)
	if c := r.Cluster(name); c != nil {
		all = append(all, c.Diagnostics...)
	}
	return all.Sorted()
}

// Valid reports whether a cluster exists and has no errors, repository-wide or its own.
func (r *Repository) Valid(name string) bool {
	return r.Cluster(name) != nil && !r.ClusterDiagnostics(name).HasErrors()
}

// AllDiagnostics returns every diagnostic of the repository and its clusters, sorted, each once (a file
// listed by two clusters is reported once).
func (r *Repository) AllDiagnostics() diag.List {
	all := slices.Clone(r.Diagnostics)
	for _, c := range r.Clusters {
		all = append(all, c.Diagnostics...)
	}
	return all.Sorted()
}

// parsed is one manifest file's result.
type parsed struct {
	resources []*manifest.Resource
	diags     diag.List
}

// Load reads a repository from fsys, whose root is the repository root. It never fails: every problem is a
// diagnostic.
func Load(fsys fs.FS) *Repository {
	l := &loader{fsys: fsys, repo: &Repository{}}
	return l.load()
}

func (l *loader) load() *Repository {
	l.loadProcessConfig()
	l.repo.Config = Overlay(l.repo.Config, l.process)
	l.loadClusters()
	if l.configOnly {
		l.checkEndpoints()
		return l.repo
	}
	l.scanKindRoots()
	files := l.compose()
	results := l.parseAll(files)
	for _, c := range l.repo.Clusters {
		l.assemble(c, results)
	}
	l.checkEndpoints()
	l.checkUnlisted()
	return l.repo
}

type loader struct {
	fsys fs.FS
	repo *Repository
	// process is laid over proxops.yaml (LoadOptions.Process); its clusters replace the repository's.
	process *Config
	// configOnly stops after the configuration (LoadOptions.ConfigOnly).
	configOnly bool
	// entries are each cluster's composition files in listed order, after path checks.
	entries map[string][]listed
	// kindFiles are the manifest files found under kind roots (not directly in them), sorted.
	kindFiles []string
	// brokenComposition is set when a resources.yaml could not be read as a list.
	brokenComposition bool
}

type listed struct {
	file string
	pos  yamldecode.Pos
}

func (l *loader) repoError(file string, pos yamldecode.Pos, format string, args ...any) {
	l.repo.Diagnostics = append(l.repo.Diagnostics, diag.Diagnostic{Severity: diag.Error, File: file,
		Line: pos.Line, Column: pos.Column, Message: fmt.Sprintf(format, args...)})
}

func (l *loader) repoWarning(file string, pos yamldecode.Pos, format string, args ...any) {
	l.repo.Diagnostics = append(l.repo.Diagnostics, diag.Diagnostic{Severity: diag.Warning, File: file,
		Line: pos.Line, Column: pos.Column, Message: fmt.Sprintf(format, args...)})
}

func clusterError(c *Cluster, file string, pos yamldecode.Pos, ref, field, format string, args ...any) {
	c.Diagnostics = append(c.Diagnostics, diag.Diagnostic{Severity: diag.Error, File: file, Line: pos.Line,
		Column: pos.Column, Ref: ref, Field: field, Message: fmt.Sprintf(format, args...)})
}

func (l *loader) loadProcessConfig() {
	data, err := fs.ReadFile(l.fsys, ProcessConfigFile)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		l.repo.Config = DefaultConfig()
		return
	case err != nil:
		l.repo.Config = DefaultConfig()
		l.repoError(ProcessConfigFile, yamldecode.Pos{}, "cannot read: %v", err)
		return
	}
	cfg, diags := decodeConfig(ProcessConfigFile, data)
	diags = append(diags, validateProcess(cfg)...)
	for _, name := range cfg.ClusterNames() {
		diags = append(diags, validateCluster(cfg.PVE.Clusters[name])...)
	}
	l.repo.Config = cfg
	l.repo.Diagnostics = append(l.repo.Diagnostics, diags...)
}

// loadClusters finds the clusters: every valid directory under clusters/ and every inline pve.clusters
// entry of proxops.yaml.
func (l *loader) loadClusters() {
	type dirInfo struct{ hasConfig, hasComposition bool }
	dirs := map[string]dirInfo{}
	entries, err := fs.ReadDir(l.fsys, ClustersDir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		l.repoError(ClustersDir, yamldecode.Pos{}, "cannot read: %v", err)
	}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		name := e.Name()
		dir := ClustersDir + "/" + name
		if !ValidClusterName(name) {
			l.repoError(dir, yamldecode.Pos{}, "not a valid cluster-name directory (lower-case letters, digits and hyphens, at most 64)")
			continue
		}
		info := dirInfo{
			hasConfig:      isFile(l.fsys, dir+"/"+ClusterConfigFile),
			hasComposition: isFile(l.fsys, dir+"/"+CompositionFile),
		}
		if !info.hasConfig && !info.hasComposition {
			l.repoError(dir+"/", yamldecode.Pos{}, "exists but has no %s", CompositionFile)
			continue
		}
		dirs[name] = info
	}

	inline := l.repo.Config.PVE.Clusters
	names := l.repo.Config.ClusterNames()
	for n := range dirs {
		if _, ok := inline[n]; !ok {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	for _, name := range names {
		c := &Cluster{Name: name}
		l.repo.Clusters = append(l.repo.Clusters, c)
		dir := ClustersDir + "/" + name
		info, hasDir := dirs[name]
		_, fromProcess := l.processClusters()[name]
		if info.hasConfig && !fromProcess {
			c.Config = l.loadClusterConfig(c, dir+"/"+ClusterConfigFile)
			if ic, ok := inline[name]; ok && c.Config != nil {
				clusterError(c, ProcessConfigFile, ic.Pos, "", "pve.clusters."+name,
					"cluster %s is also declared in %s/%s; declare it in one place", name, dir, ClusterConfigFile)
			}
		}
		if c.Config == nil {
			c.Config = inline[name]
		}
		l.checkSecretsFile(c)
		if hasDir && info.hasComposition && c.Config == nil && !info.hasConfig {
			clusterError(c, dir+"/"+CompositionFile, yamldecode.Pos{Line: 1, Column: 1}, "", "",
				"composition %s declares resources but pve.clusters has no entry for it; add %s/%s", dir, dir, ClusterConfigFile)
		}
		if !info.hasComposition {
			file, pos := ProcessConfigFile, yamldecode.Pos{}
			if c.Config != nil {
				file, pos = c.Config.File, c.Config.Pos
			}
			clusterError(c, file, pos, "", "",
				"pve.clusters.%s is configured but has no composition at %s/%s", name, dir, CompositionFile)
		}
	}
	if len(l.repo.Clusters) == 0 {
		l.repoError("", yamldecode.Pos{}, "no clusters: add clusters/<name>/config.yaml (the PVE endpoint and nodes) and clusters/<name>/resources.yaml (the manifests it consumes)")
	}
}

// processClusters are the clusters the process configuration declares (they replace the repository's).
func (l *loader) processClusters() map[string]*ClusterConfig {
	if l.process == nil {
		return nil
	}
	return l.process.PVE.Clusters
}

// loadClusterConfig reads clusters/<name>/config.yaml, which must declare exactly pve.clusters.<name>.
func (l *loader) loadClusterConfig(c *Cluster, file string) *ClusterConfig {
	data, err := fs.ReadFile(l.fsys, file)
	if err != nil {
		clusterError(c, file, yamldecode.Pos{}, "", "", "cannot read: %v", err)
		return nil
	}
	cfg, cfgDiags := ParseClusterFile(file, c.Name, data)
	c.Diagnostics = append(c.Diagnostics, cfgDiags...)
	return cfg
}

// ParseClusterFile reads a cluster-local configuration file, which must declare exactly one pve.clusters
// entry, named name. Only that entry is used; the file's other keys are checked for their types and
// otherwise ignored. The entry is returned even when it has problems (nil when there is none).
func ParseClusterFile(file, name string, data []byte) (*ClusterConfig, diag.List) {
	cfg, diags := decodeConfig(file, data)
	names := cfg.ClusterNames()
	at := func(field string) yamldecode.Pos {
		p := cfg.Positions.Lookup(field)
		if p.Line == 0 {
			p = yamldecode.Pos{Line: 1, Column: 1}
		}
		return p
	}
	for _, other := range names {
		if other != name {
			diags = append(diags, diag.Diagnostic{Severity: diag.Error, File: file,
				Line: at("pve.clusters." + other).Line, Column: at("pve.clusters." + other).Column,
				Message: fmt.Sprintf("%s declares pve.clusters.%s, which does not match its directory name %s", file, diag.Excerpt(other), name)})
		}
	}
	cl, ok := cfg.PVE.Clusters[name]
	if !ok {
		if len(names) == 0 {
			p := at("pve.clusters")
			diags = append(diags, diag.Diagnostic{Severity: diag.Error, File: file, Line: p.Line, Column: p.Column,
				Message: fmt.Sprintf("%s declares no pve.clusters entry; it must declare pve.clusters.%s", file, name)})
		}
		return nil, diags
	}
	return cl, append(diags, validateCluster(cl)...)
}

// isFile reports whether name is a file, or something there cannot be read (a refused link): reading it
// then reports why.
func isFile(fsys fs.FS, name string) bool {
	info, err := fs.Stat(fsys, name)
	if err != nil {
		return !errors.Is(err, fs.ErrNotExist)
	}
	return !info.IsDir()
}

func isManifestName(name string) bool {
	return strings.HasSuffix(name, ".yaml") || strings.HasSuffix(name, ".yml")
}

// scanKindRoots reports manifest files directly under a kind root (the layout before compositions) and
// collects the manifest files below the kind roots.
func (l *loader) scanKindRoots() {
	for _, root := range manifest.KindRoots {
		_ = fs.WalkDir(l.fsys, root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				if !errors.Is(err, fs.ErrNotExist) {
					l.repoError(p, yamldecode.Pos{}, "cannot read: %v", err)
				}
				return nil
			}
			if d.IsDir() || !isManifestName(p) {
				return nil
			}
			if path.Dir(p) == root {
				l.repoError(p, yamldecode.Pos{}, "legacy layout: sits directly under the %s/ kind root, which is no longer read; move it to %s/base/ or %s/<cluster>/ and list it in clusters/<cluster>/%s",
					root, root, root, CompositionFile)
				return nil
			}
			l.kindFiles = append(l.kindFiles, p)
			return nil
		})
	}
	slices.Sort(l.kindFiles)
}

// compose reads every cluster's resources.yaml, checks each listed path and returns the set of files to
// parse.
func (l *loader) compose() []string {
	l.entries = map[string][]listed{}
	set := map[string]bool{}
	for _, c := range l.repo.Clusters {
		dir := ClustersDir + "/" + c.Name
		file := dir + "/" + CompositionFile
		data, err := fs.ReadFile(l.fsys, file)
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				clusterError(c, file, yamldecode.Pos{}, "", "", "cannot read: %v", err)
			}
			continue
		}
		entries, diags := ParseComposition(file, data)
		c.Diagnostics = append(c.Diagnostics, diags...)
		if diags.HasErrors() {
			l.brokenComposition = true
		}
		first := map[string]yamldecode.Pos{}
		for _, e := range entries {
			p, ok := l.checkEntry(c, file, dir, e)
			if !ok {
				continue
			}
			if at, dup := first[p]; dup {
				clusterError(c, file, e.Pos, "", "", "references the same resource %s more than once (first at line %d)", p, at.Line)
				continue
			}
			first[p] = e.Pos
			l.entries[c.Name] = append(l.entries[c.Name], listed{file: p, pos: e.Pos})
			c.Files = append(c.Files, p)
			set[p] = true
		}
		slices.Sort(c.Files)
	}
	files := make([]string, 0, len(set))
	for f := range set {
		files = append(files, f)
	}
	slices.Sort(files)
	return files
}

// checkEntry resolves a listed path against the cluster directory and checks it.
func (l *loader) checkEntry(c *Cluster, file, dir string, e Entry) (string, bool) {
	raw := e.Path
	if strings.TrimSpace(raw) == "" {
		clusterError(c, file, e.Pos, "", "", "empty resource path")
		return "", false
	}
	p := path.Join(dir, raw)
	if path.IsAbs(raw) || strings.Contains(raw, `\`) || p == ".." || strings.HasPrefix(p, "../") || !fs.ValidPath(p) {
		clusterError(c, file, e.Pos, "", "", "resource path %s escapes the repository root or is malformed", diag.Excerpt(raw))
		return "", false
	}
	info, err := fs.Stat(l.fsys, p)
	switch {
	case err != nil && errors.Is(err, fs.ErrNotExist):
		clusterError(c, file, e.Pos, "", "", "references missing resource %s", p)
		return "", false
	case err != nil:
		clusterError(c, file, e.Pos, "", "", "cannot read resource %s: %v", p, err)
		return "", false
	case info.IsDir():
		clusterError(c, file, e.Pos, "", "", "references a directory %s; list the manifest files in it", p)
		return "", false
	case !isManifestName(p):
		clusterError(c, file, e.Pos, "", "", "references a non-manifest path %s (want a .yaml or .yml file)", p)
		return "", false
	}
	root, rest, _ := strings.Cut(p, "/")
	if _, ok := manifest.KindOfRoot(root); !ok || !strings.Contains(rest, "/") {
		if ok {
			// Directly under a kind root: reported once for the whole repository as a legacy layout.
			return "", false
		}
		clusterError(c, file, e.Pos, "", "", "resource %s is not under a recognised kind root (%s/)", p, strings.Join(kindRootOrder(), "/, "))
		return "", false
	}
	return p, true
}

func kindRootOrder() []string {
	out := make([]string, len(manifest.Kinds))
	for i, k := range manifest.Kinds {
		out[i] = k.Root()
	}
	return out
}

// parseAll reads and parses every listed manifest file, in parallel, and checks that each manifest sits
// under its kind's root.
func (l *loader) parseAll(files []string) map[string]*parsed {
	results := make([]*parsed, len(files))
	workers := min(runtime.GOMAXPROCS(0), max(1, len(files)))
	var wg sync.WaitGroup
	next := make(chan int)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				results[i] = parseFile(l.fsys, files[i])
			}
		}()
	}
	for i := range files {
		next <- i
	}
	close(next)
	wg.Wait()
	out := make(map[string]*parsed, len(files))
	total := 0
	for i, f := range files {
		p := results[i]
		if total+len(p.resources) > resourceCap {
			// The resources beyond the cap are dropped with an error where the first of them is.
			keep := max(0, resourceCap-total)
			pos := p.resources[keep].Source.Pos("kind")
			p.diags = append(p.diags, diag.Diagnostic{Severity: diag.Error, File: f, Line: pos.Line, Column: pos.Column,
				Ref:     p.resources[keep].Ref().String(),
				Message: fmt.Sprintf("more than %d manifests in the repository: the manifests from here on are not read", resourceCap)})
			p.resources = p.resources[:keep]
		}
		total += len(p.resources)
		out[f] = p
	}
	return out
}

// MaxResources is the most manifests a repository may hold; with yamldecode.MaxDocuments per file it bounds
// what one tree costs to plan. Manifests beyond it (in the order files are listed) are refused with an error.
const MaxResources = 100000

// resourceCap is MaxResources, lowered by tests.
var resourceCap = MaxResources

func parseFile(fsys fs.FS, file string) *parsed {
	data, err := fs.ReadFile(fsys, file)
	if err != nil {
		return &parsed{diags: diag.List{{Severity: diag.Error, File: file, Message: fmt.Sprintf("cannot read: %v", err)}}}
	}
	rs, diags := manifest.Parse(file, data)
	root, _, _ := strings.Cut(file, "/")
	for _, r := range rs {
		if r.Kind.Root() != root {
			pos := r.Source.Pos("kind")
			diags = append(diags, diag.Diagnostic{Severity: diag.Error, File: file, Line: pos.Line, Column: pos.Column,
				Ref: r.Ref().String(), Field: "kind",
				Message: fmt.Sprintf("%s %s manifest does not belong under %s/ (%s manifests live under %s/)", manifest.Article(r.Kind), r.Kind, root, r.Kind, r.Kind.Root())})
		}
	}
	return &parsed{resources: rs, diags: diags}
}

// assemble builds a cluster's resources from its files and checks the invariants across them.
func (l *loader) assemble(c *Cluster, results map[string]*parsed) {
	var all []*manifest.Resource
	for _, f := range c.Files {
		p := results[f]
		c.Diagnostics = append(c.Diagnostics, p.diags...)
		all = append(all, p.resources...)
	}
	// Files in path order, documents in file order: the first definition of a Kind/name wins.
	byRef := make(map[manifest.Ref]*manifest.Resource, len(all))
	for _, r := range all {
		if first, dup := byRef[r.Ref()]; dup {
			clusterError(c, r.Source.File, r.Source.Pos("metadata.name"), r.Ref().String(), "metadata.name",
				"duplicate resource %s (%s also defines it)", r.Ref(), where(first, "metadata.name"))
			continue
		}
		byRef[r.Ref()] = r
		c.Resources = append(c.Resources, r)
	}
	l.checkVMIDs(c)
	l.checkPoolIDs(c)
	l.checkBackupJobs(c)
	l.checkHARules(c)
	l.checkFirewallObjectNames(c)
	l.checkNodes(c)
	l.checkReferences(c, byRef)
	slices.SortFunc(c.Resources, func(a, b *manifest.Resource) int { return manifest.CompareRefs(a.Ref(), b.Ref()) })
	c.Graph = graph.FromResources(c.Resources)
	for _, cycle := range c.Graph.Cycles() {
		from := byRef[cycle[0]]
		to := cycle[0]
		if len(cycle) > 1 {
			to = cycle[1]
		}
		field := edgeField(from, to)
		clusterError(c, from.Source.File, from.Source.Pos(field), from.Ref().String(), field,
			"dependency cycle detected: %s", cycle)
	}
}

// where renders a resource's field position as file:line:col.
func where(r *manifest.Resource, field string) string {
	p := r.Source.Pos(field)
	if p.Line == 0 {
		return r.Source.File
	}
	return fmt.Sprintf("%s:%d:%d", r.Source.File, p.Line, p.Column)
}

// edgeField is the field of from that makes it depend on to.
func edgeField(from *manifest.Resource, to manifest.Ref) string {
	for _, ref := range from.References() {
		if ref.Target == to {
			return ref.Field
		}
	}
	return "metadata.name"
}

// checkVMIDs reports a vmid used twice in a cluster: PVE vmids are unique across the whole cluster, qemu
// and lxc alike, whatever the node.
func (l *loader) checkVMIDs(c *Cluster) {
	owner := map[int]*manifest.Resource{}
	for _, r := range c.Resources {
		id := r.VMID()
		if !r.Kind.IsGuest() || id == 0 {
			continue
		}
		if first, dup := owner[id]; dup {
			clusterError(c, r.Source.File, r.Source.Pos("spec.vmid"), r.Ref().String(), "spec.vmid",
				"PVE id %d is claimed by both %s (%s) and %s; vmids are unique across the whole cluster, whatever the node",
				id, first.Ref(), where(first, "spec.vmid"), r.Ref())
			continue
		}
		owner[id] = r
	}
}

// allows reports whether a node is in the cluster's allowlist (an empty allowlist allows every node).
func (c *Cluster) allows(node string) bool {
	return c.Config == nil || len(c.Config.Nodes) == 0 || slices.Contains(c.Config.Nodes, node)
}

// checkNodes reports nodes outside the cluster's allowlist.
func (l *loader) checkNodes(c *Cluster) {
	if c.Config == nil || len(c.Config.Nodes) == 0 {
		return
	}
	allowed := c.Config.Nodes
	report := func(r *manifest.Resource, field, node string) {
		if node != "" && !slices.Contains(allowed, node) {
			clusterError(c, r.Source.File, r.Source.Pos(field), r.Ref().String(), field,
				"references node %s which is not in pve.clusters.%s.nodes (allowed: [%s])", diag.Excerpt(node), c.Name, strings.Join(allowed, " "))
		}
	}
	for _, r := range c.Resources {
		switch s := r.Spec.(type) {
		case *manifest.VMSpec:
			report(r, "spec.node", s.Node)
		case *manifest.LXCSpec:
			report(r, "spec.node", s.Node)
		case *manifest.ArtifactSpec:
			if len(s.Nodes) == 0 {
				report(r, "spec.node", s.Node)
			}
			for i, n := range s.Nodes {
				report(r, yamldecode.Index("spec.nodes", i), n)
			}
		}
	}
}

// checkReferences resolves every reference within the cluster's composition and checks placement.
func (l *loader) checkReferences(c *Cluster, byRef map[manifest.Ref]*manifest.Resource) {
	for _, r := range c.Resources {
		for _, ref := range r.References() {
			pos := r.Source.Pos(ref.Field)
			target, ok := byRef[ref.Target]
			if ref.Annotation {
				if !ok {
					clusterError(c, r.Source.File, pos, r.Ref().String(), ref.Field,
						"dependency target %s is not defined in the repo (clusters/%s/%s does not list it)", ref.Target, c.Name, CompositionFile)
				}
				continue
			}
			if !ok {
				clusterError(c, r.Source.File, pos, r.Ref().String(), ref.Field, "%s", unresolved(ref.Target, byRef))
				continue
			}
			node := r.Node()
			if node == "" || !c.allows(node) {
				continue
			}
			if ref.Target.Kind.CreationOnly() {
				// Where a guest may live does not depend on what it was made from: the planner checks these
				// references for the guests it has to create.
				if target.Kind == manifest.KindTemplateVM && target.VMID() != 0 && target.VMID() == r.VMID() {
					clusterError(c, r.Source.File, pos, r.Ref().String(), ref.Field,
						"TemplateVM %s has the same vmid %d as this VM", diag.Excerpt(target.Metadata.Name), target.VMID())
				}
				continue
			}
			if a := target.Artifact(); a != nil && !a.PlacedOn(node) {
				clusterError(c, r.Source.File, pos, r.Ref().String(), ref.Field,
					"%s %s is not placed on node %s (%s nodes: [%s])", target.Kind, diag.Excerpt(target.Metadata.Name), node, target.Kind, strings.Join(a.PlacementNodes(), " "))
			}
			if target.Kind == manifest.KindTemplateVM {
				switch {
				case target.Node() != "" && target.Node() != node:
					clusterError(c, r.Source.File, pos, r.Ref().String(), ref.Field,
						"TemplateVM %s is on node %s, not on %s: a clone is made on its template's node", diag.Excerpt(target.Metadata.Name), target.Node(), node)
				case target.VMID() != 0 && target.VMID() == r.VMID():
					clusterError(c, r.Source.File, pos, r.Ref().String(), ref.Field,
						"TemplateVM %s has the same vmid %d as this VM", diag.Excerpt(target.Metadata.Name), target.VMID())
				}
			}
		}
	}
}

// unresolved explains a reference to a resource the composition does not define, naming a resource of
// another kind with that name if there is one.
func unresolved(target manifest.Ref, byRef map[manifest.Ref]*manifest.Resource) string {
	for _, k := range manifest.Kinds {
		other := manifest.Ref{Kind: k, Name: target.Name}
		if k != target.Kind {
			if _, ok := byRef[other]; ok {
				return fmt.Sprintf("references %s %s, which is not %s %s", k, diag.Excerpt(target.Name), manifest.Article(target.Kind), target.Kind)
			}
		}
	}
	return fmt.Sprintf("references unknown %s %s", target.Kind, diag.Excerpt(target.Name))
}

// checkEndpoints reports clusters that share a PVE endpoint.
func (l *loader) checkEndpoints() {
	byURL := map[string][]*Cluster{}
	var urls []string
	for _, c := range l.repo.Clusters {
		if c.Config == nil || c.Config.BaseURL == "" {
			continue
		}
		u := strings.TrimRight(strings.ToLower(c.Config.BaseURL), "/")
		if _, ok := byURL[u]; !ok {
			urls = append(urls, u)
		}
		byURL[u] = append(byURL[u], c)
	}
	for _, u := range urls {
		cs := byURL[u]
		if len(cs) < 2 {
			continue
		}
		for _, c := range cs {
			var others []string
			for _, o := range cs {
				if o != c {
					others = append(others, o.Name)
				}
			}
			clusterError(c, c.Config.File, c.Config.Pos, "", "pve.clusters."+c.Name+".base-url",
				"base-url %s is also the endpoint of cluster %s; each cluster needs its own", diag.Excerpt(c.Config.BaseURL), strings.Join(others, ", "))
		}
	}
}

// checkUnlisted warns about manifest files under kind roots that no cluster lists.
func (l *loader) checkUnlisted() {
	if len(l.repo.Clusters) == 0 {
		return
	}
	if l.brokenComposition {
		return
	}
	used := map[string]bool{}
	for _, c := range l.repo.Clusters {
		for _, f := range c.Files {
			used[f] = true
		}
	}
	for _, f := range l.kindFiles {
		if !used[f] {
			l.repoWarning(f, yamldecode.Pos{}, "not listed in any clusters/<name>/%s; ProxOps ignores it", CompositionFile)
		}
	}
}

// checkSecretsFile reports a cluster's relative secrets-file that is not in the repository.
func (l *loader) checkSecretsFile(c *Cluster) {
	if c.Config == nil || c.Config.SecretsFile == "" {
		return
	}
	p := c.Config.SecretsPath()
	if path.IsAbs(p) || strings.HasPrefix(p, "~") {
		return
	}
	field := "pve.clusters." + c.Name + ".secrets-file"
	pos := c.Config.Positions.Lookup(field)
	if !fs.ValidPath(p) {
		clusterError(c, c.Config.File, pos, "", field, "secrets-file %s escapes the repository root", diag.Excerpt(c.Config.SecretsFile))
		return
	}
	if !isFile(l.fsys, p) {
		clusterError(c, c.Config.File, pos, "", field, "secrets-file %s does not exist", p)
	}
}
