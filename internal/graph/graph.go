// Package graph is the dependency graph of a cluster's resources: which resource must exist before which.
// It computes a deterministic topological order (levels, then a total order within a level) and reports
// every dependency cycle with its whole path. It is pure.
package graph

import (
	"cmp"
	"slices"
	"strings"

	"github.com/proxops/proxops/internal/manifest"
)

// Edge says that From depends on To (To must be provisioned first).
type Edge struct {
	From manifest.Ref
	To   manifest.Ref
	// Field is the field of From that makes the dependency (spec.clone, metadata.annotations.proxops/depends-on).
	Field string
}

// Graph is a set of resources and the dependencies between them. The zero value is not usable; use New.
type Graph struct {
	nodes []manifest.Ref
	index map[manifest.Ref]int
	deps  [][]int // deps[i]: sorted, unique indices node i depends on
	rdeps [][]int // rdeps[i]: sorted, unique indices depending on node i
	edges []Edge
	seen  map[Edge]bool
}

// New returns a graph of the given resources with no edges. Duplicates are ignored.
func New(refs []manifest.Ref) *Graph {
	nodes := slices.Clone(refs)
	slices.SortFunc(nodes, manifest.CompareRefs)
	nodes = slices.Compact(nodes)
	g := &Graph{nodes: nodes, index: make(map[manifest.Ref]int, len(nodes)), seen: map[Edge]bool{}}
	for i, r := range nodes {
		g.index[r] = i
	}
	g.deps = make([][]int, len(nodes))
	g.rdeps = make([][]int, len(nodes))
	return g
}

// FromResources builds the graph of a set of resources with every reference (structured and annotation)
// whose target is among them. References to resources outside the set are left out (the repository loader
// reports them).
func FromResources(rs []*manifest.Resource) *Graph {
	refs := make([]manifest.Ref, len(rs))
	for i, r := range rs {
		refs[i] = r.Ref()
	}
	g := New(refs)
	for _, r := range rs {
		for _, ref := range r.References() {
			g.AddEdge(r.Ref(), ref.Target, ref.Field)
		}
	}
	return g
}

// Has reports whether a resource is in the graph.
func (g *Graph) Has(r manifest.Ref) bool {
	_, ok := g.index[r]
	return ok
}

// AddEdge records that from depends on to. It reports false (and records nothing) when either is not in
// the graph. A repeated edge is recorded once per field.
func (g *Graph) AddEdge(from, to manifest.Ref, field string) bool {
	f, ok1 := g.index[from]
	t, ok2 := g.index[to]
	if !ok1 || !ok2 {
		return false
	}
	e := Edge{From: from, To: to, Field: field}
	if g.seen[e] {
		return true
	}
	g.seen[e] = true
	g.edges = append(g.edges, e)
	g.deps[f] = insertSorted(g.deps[f], t)
	g.rdeps[t] = insertSorted(g.rdeps[t], f)
	return true
}

func insertSorted(s []int, v int) []int {
	i, found := slices.BinarySearch(s, v)
	if found {
		return s
	}
	return slices.Insert(s, i, v)
}

// Nodes returns the resources, sorted.
func (g *Graph) Nodes() []manifest.Ref { return slices.Clone(g.nodes) }

// Edges returns every edge sorted by from, to and field.
func (g *Graph) Edges() []Edge {
	out := slices.Clone(g.edges)
	slices.SortFunc(out, func(a, b Edge) int {
		return cmp.Or(manifest.CompareRefs(a.From, b.From), manifest.CompareRefs(a.To, b.To), cmp.Compare(a.Field, b.Field))
	})
	return out
}

// Dependencies returns what r depends on directly, sorted.
func (g *Graph) Dependencies(r manifest.Ref) []manifest.Ref { return g.refs(g.deps, r) }

// Dependents returns what depends on r directly, sorted.
func (g *Graph) Dependents(r manifest.Ref) []manifest.Ref { return g.refs(g.rdeps, r) }

func (g *Graph) refs(adj [][]int, r manifest.Ref) []manifest.Ref {
	i, ok := g.index[r]
	if !ok {
		return nil
	}
	out := make([]manifest.Ref, len(adj[i]))
	for j, k := range adj[i] {
		out[j] = g.nodes[k]
	}
	return out
}

// Cycle is a dependency cycle: each resource depends on the next, and the last on the first.
type Cycle []manifest.Ref

// String renders the cycle closed on its first element: A → B → A.
func (c Cycle) String() string {
	if len(c) == 0 {
		return ""
	}
	parts := make([]string, 0, len(c)+1)
	for _, r := range c {
		parts = append(parts, r.String())
	}
	parts = append(parts, c[0].String())
	return strings.Join(parts, " → ")
}

// Cycles returns one cycle per strongly connected component that has one, each starting at its smallest
// resource and following the shortest way back to it (ties broken by resource order). Cycles are sorted
// by their first resource.
func (g *Graph) Cycles() []Cycle {
	var out []Cycle
	for _, comp := range g.components() {
		if len(comp) == 1 && !slices.Contains(g.deps[comp[0]], comp[0]) {
			continue
		}
		out = append(out, g.shortestCycle(comp))
	}
	slices.SortFunc(out, func(a, b Cycle) int { return manifest.CompareRefs(a[0], b[0]) })
	return out
}

// components returns the strongly connected components (Tarjan, iterative), each sorted.
func (g *Graph) components() [][]int {
	n := len(g.nodes)
	index := make([]int, n)
	low := make([]int, n)
	onStack := make([]bool, n)
	for i := range index {
		index[i] = -1
	}
	var stack []int
	var comps [][]int
	next := 0
	type frame struct{ v, child int }
	for root := range n {
		if index[root] >= 0 {
			continue
		}
		call := []frame{{v: root}}
		index[root], low[root] = next, next
		next++
		stack = append(stack, root)
		onStack[root] = true
		for len(call) > 0 {
			f := &call[len(call)-1]
			if f.child < len(g.deps[f.v]) {
				w := g.deps[f.v][f.child]
				f.child++
				if index[w] < 0 {
					index[w], low[w] = next, next
					next++
					stack = append(stack, w)
					onStack[w] = true
					call = append(call, frame{v: w})
				} else if onStack[w] {
					low[f.v] = min(low[f.v], index[w])
				}
				continue
			}
			v := f.v
			call = call[:len(call)-1]
			if len(call) > 0 {
				p := call[len(call)-1].v
				low[p] = min(low[p], low[v])
			}
			if low[v] == index[v] {
				var comp []int
				for {
					w := stack[len(stack)-1]
					stack = stack[:len(stack)-1]
					onStack[w] = false
					comp = append(comp, w)
					if w == v {
						break
					}
				}
				slices.Sort(comp)
				comps = append(comps, comp)
			}
		}
	}
	return comps
}

// shortestCycle finds the shortest cycle through the smallest node of a component, by breadth-first search
// inside the component with neighbours in sorted order.
func (g *Graph) shortestCycle(comp []int) Cycle {
	start := comp[0]
	in := make(map[int]bool, len(comp))
	for _, v := range comp {
		in[v] = true
	}
	prev := map[int]int{}
	queue := []int{start}
	visited := map[int]bool{start: true}
	end := -1
	for len(queue) > 0 && end < 0 {
		v := queue[0]
		queue = queue[1:]
		for _, w := range g.deps[v] {
			if !in[w] {
				continue
			}
			if w == start {
				end = v
				break
			}
			if !visited[w] {
				visited[w] = true
				prev[w] = v
				queue = append(queue, w)
			}
		}
	}
	var path []int
	for v := end; v != start; v = prev[v] {
		path = append(path, v)
	}
	path = append(path, start)
	slices.Reverse(path)
	out := make(Cycle, len(path))
	for i, v := range path {
		out[i] = g.nodes[v]
	}
	return out
}

// Levels returns the level of every resource that is not in or behind a cycle: 0 for a resource with no
// dependencies, else one more than its highest dependency. Resources in a cycle, or depending on one, are
// left out.
func (g *Graph) Levels() map[manifest.Ref]int {
	n := len(g.nodes)
	level := make([]int, n)
	pending := make([]int, n)
	var ready []int
	for i := range n {
		pending[i] = len(g.deps[i])
		if pending[i] == 0 {
			ready = append(ready, i)
		}
	}
	out := make(map[manifest.Ref]int, n)
	for len(ready) > 0 {
		v := ready[0]
		ready = ready[1:]
		out[g.nodes[v]] = level[v]
		for _, w := range g.rdeps[v] {
			level[w] = max(level[w], level[v]+1)
			pending[w]--
			if pending[w] == 0 {
				ready = append(ready, w)
			}
		}
	}
	return out
}

// Order returns the resources in provisioning order: by level, then by resource order within a level.
// Resources in or behind a cycle are not in the order; they are reported by Cycles.
func (g *Graph) Order() []manifest.Ref {
	levels := g.Levels()
	out := make([]manifest.Ref, 0, len(levels))
	for _, r := range g.nodes {
		if _, ok := levels[r]; ok {
			out = append(out, r)
		}
	}
	slices.SortStableFunc(out, func(a, b manifest.Ref) int { return cmp.Compare(levels[a], levels[b]) })
	return out
}

// Blocked returns the resources that are in a cycle or depend on one, sorted.
func (g *Graph) Blocked() []manifest.Ref {
	levels := g.Levels()
	var out []manifest.Ref
	for _, r := range g.nodes {
		if _, ok := levels[r]; !ok {
			out = append(out, r)
		}
	}
	return out
}
