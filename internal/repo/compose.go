package repo

import (
	"go.yaml.in/yaml/v3"

	"github.com/proxops/proxops/internal/diag"
	"github.com/proxops/proxops/internal/yamldecode"
)

// Entry is one path listed in a resources.yaml, as written, with its position.
type Entry struct {
	Path string
	Pos  yamldecode.Pos
}

// ParseComposition reads a cluster's resources.yaml: either a mapping with a resources list or a bare list
// of paths. An empty file or an empty list composes nothing.
func ParseComposition(file string, data []byte) ([]Entry, diag.List) {
	root, diags := oneDocument(file, data, "a composition")
	if root == nil {
		return nil, diags
	}
	d := yamldecode.NewDecoder(file)
	list := root
	field := "resources"
	if list.Kind == yaml.MappingNode {
		list = nil
		for _, p := range d.Pairs(root, "") {
			key := yamldecode.Resolve(p.Key)
			if key == nil || key.Kind != yaml.ScalarNode {
				d.Errorf(yamldecode.Of(p.Key), "", "expected a field name")
				continue
			}
			if key.Value != "resources" {
				d.Unknown(key, key.Value, []string{"resources"})
				continue
			}
			list = yamldecode.Resolve(p.Value)
			if yamldecode.IsNull(list) {
				list = nil
			}
		}
	} else {
		field = ""
	}
	if list == nil {
		return nil, append(diags, d.Diags...)
	}
	if list.Kind != yaml.SequenceNode {
		got := yamldecode.Describe(list)
		if list == root {
			got = yamldecode.Shape(list)
		}
		d.Errorf(yamldecode.Of(list), field, "expected a list of manifest paths, got %s", got)
		return nil, append(diags, d.Diags...)
	}
	var out []Entry
	for i, item := range list.Content {
		s, ok := d.Scalar(item, yamldecode.Index(field, i), "a manifest path")
		if !ok {
			continue
		}
		out = append(out, Entry{Path: s, Pos: yamldecode.Of(yamldecode.Resolve(item))})
	}
	return out, append(diags, d.Diags...)
}

// oneDocument reads a file that holds one YAML document (what names it in the diagnostic about a second
// one) and returns its root, nil when the file holds none.
func oneDocument(file string, data []byte, what string) (*yaml.Node, diag.List) {
	docs, diags := yamldecode.Documents(file, data)
	if len(docs) > 1 {
		diags = append(diags, diag.Diagnostic{Severity: diag.Error, File: file, Line: docs[1].Root.Line,
			Column: docs[1].Root.Column, Message: what + " holds one YAML document"})
	}
	if len(docs) == 0 {
		return nil, diags
	}
	return docs[0].Root, diags
}
