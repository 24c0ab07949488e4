package repo

import (
	"io/fs"
	"maps"
	"reflect"
	"strings"

	"github.com/proxops/proxops/internal/yamldecode"
)

// LoadOptions adjust how a repository is read.
type LoadOptions struct {
	// Process is a process configuration given from outside the repository (a --config file, command-line
	// flags). It is laid over the repository's proxops.yaml (see Overlay): every key it sets wins, and each
	// of its inline pve.clusters entries is that cluster's configuration, in place of the repository's
	// clusters/<name>/config.yaml. It is the caller's to check (ParseConfigFile); Load does not report its
	// problems again.
	Process *Config
	// ConfigOnly reads the configuration (proxops.yaml and every cluster's config.yaml) and no manifest: the
	// repository's clusters and their settings, for a caller that hands the tree to a planner elsewhere.
	// Its clusters have no resources, and problems of the manifests and compositions are not reported.
	ConfigOnly bool
}

// LoadWith reads a repository like Load, with options.
func LoadWith(fsys fs.FS, opts LoadOptions) *Repository {
	l := &loader{fsys: fsys, repo: &Repository{}, process: opts.Process, configOnly: opts.ConfigOnly}
	return l.load()
}

// Overlay returns the configuration base with over laid on it: every key over sets (over.Positions) takes
// over's value, every other key keeps base's; the inline clusters are the union of both, over's entry
// winning for a name both declare. The result keeps base's File; its Positions are base's with over's added,
// so it can be laid over another configuration in turn. Neither argument is changed.
func Overlay(base, over *Config) *Config {
	if over == nil {
		return base
	}
	out := *base
	overlayStruct(reflect.ValueOf(&out).Elem(), reflect.ValueOf(over).Elem(), "", over.Positions)
	out.PVE.Clusters = maps.Clone(base.PVE.Clusters)
	if len(over.PVE.Clusters) > 0 {
		if out.PVE.Clusters == nil {
			out.PVE.Clusters = map[string]*ClusterConfig{}
		}
		maps.Copy(out.PVE.Clusters, over.PVE.Clusters)
	}
	out.Positions = maps.Clone(base.Positions)
	if out.Positions == nil {
		out.Positions = yamldecode.Positions{}
	}
	maps.Copy(out.Positions, over.Positions)
	return &out
}

// overlayStruct copies every yaml field of src that set names (by dotted path) into dst, recursing into
// nested sections.
func overlayStruct(dst, src reflect.Value, prefix string, set yamldecode.Positions) {
	t := dst.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "" || name == "-" || name == "clusters" {
			continue
		}
		p := yamldecode.Join(prefix, name)
		if f.Type.Kind() == reflect.Struct {
			overlayStruct(dst.Field(i), src.Field(i), p, set)
			continue
		}
		if _, ok := set[p]; ok {
			dst.Field(i).Set(src.Field(i))
		}
	}
}
