// Package manifest holds the kinds of ProxOps manifests (VM, LXC, TemplateVM, TemplateCT, ISO,
// CTTemplate, DiskImage, Pool, HARule, BackupJob, SecurityGroup, IPSet, Alias): their types, parsing from multi-document YAML files with the position of every
// field, per-kind validation that reports every problem at once, the default values ProxOps applies
// (computed by functions that return them, never written into the parsed value) and the references between
// resources. It is pure: no I/O beyond the bytes it is given.
package manifest

import (
	"go.yaml.in/yaml/v3"

	"github.com/proxops/proxops/internal/diag"
	"github.com/proxops/proxops/internal/yamldecode"
)

// kindList is the list of kinds named in messages.
var kindList = "VM, LXC, TemplateVM, TemplateCT, ISO, CTTemplate, DiskImage, Pool, HARule, BackupJob, SecurityGroup, IPSet, Alias"

var envelopeFields = []string{"apiVersion", "kind", "metadata", "spec"}

// Parse reads every document of a manifest file. file is the slash-separated path diagnostics name. It
// returns the resources whose kind and name could be read (with their Source set), each validated, and
// every problem found: syntax errors, unknown or missing kinds, bad field types, unknown fields (warnings)
// and validation errors.
func Parse(file string, data []byte) ([]*Resource, diag.List) {
	var out []*Resource
	var diags diag.List
	// One document's YAML nodes at a time: only the decoded resources are kept.
	diags = append(diags, yamldecode.EachDocument(file, data, func(doc yamldecode.Document) {
		r, ds := parseDocument(file, doc)
		diags = append(diags, ds...)
		if r != nil {
			out = append(out, r)
			diags = append(diags, Validate(r)...)
		}
	})...)
	return out, diags
}

func parseDocument(file string, doc yamldecode.Document) (*Resource, diag.List) {
	d := yamldecode.NewCompactDecoder(file)
	root := doc.Root
	if root.Kind != yaml.MappingNode {
		d.Errorf(yamldecode.Of(root), "", "expected a manifest (a mapping with apiVersion, kind, metadata and spec), got %s",
			yamldecode.Shape(root))
		return nil, d.Diags
	}
	pairs := d.Pairs(root, "")
	var apiNode, kindNode, metaNode, specNode *yaml.Node
	for _, p := range pairs {
		key := yamldecode.Resolve(p.Key)
		if key == nil || key.Kind != yaml.ScalarNode {
			d.Errorf(yamldecode.Of(p.Key), "", "expected a field name, got %s", yamldecode.Describe(key))
			continue
		}
		d.Record(key.Value, p.Key, p.Value)
		switch key.Value {
		case "apiVersion":
			apiNode = p.Value
		case "kind":
			kindNode = p.Value
		case "metadata":
			metaNode = p.Value
		case "spec":
			specNode = p.Value
		default:
			d.Unknown(key, key.Value, envelopeFields)
		}
	}
	docPos := yamldecode.Of(root)

	// Identity first, so every later diagnostic names the resource.
	var kind Kind
	kindOK := false
	if yamldecode.IsNull(kindNode) {
		d.Errorf(docPos, "kind", "required (one of %s)", kindList)
	} else if s, ok := d.Scalar(kindNode, "kind", "a kind"); ok {
		if kind, kindOK = ParseKind(s); !kindOK {
			d.Errorf(yamldecode.Of(kindNode), "kind", "unknown kind %s (want one of %s)", diag.Excerpt(s), kindList)
		}
	}
	name := scalarField(d, metaNode, "name")
	if kindOK && name != "" {
		d.Ref = Ref{Kind: kind, Name: name}.String()
	}

	if yamldecode.IsNull(apiNode) {
		d.Errorf(docPos, "apiVersion", "required (%s)", APIVersion)
	}
	var api string
	if !yamldecode.IsNull(apiNode) {
		if s, ok := d.Scalar(apiNode, "apiVersion", "a string"); ok {
			api = APIVersion // held once rather than once per document
			if s != APIVersion {
				api = s
				d.Errorf(yamldecode.Of(apiNode), "apiVersion", "unsupported apiVersion %s (want %s)", diag.Excerpt(s), APIVersion)
			}
		}
	}

	var meta Metadata
	if yamldecode.IsNull(metaNode) {
		d.Errorf(docPos, "metadata", "required (with at least a name)")
	} else {
		d.Decode(metaNode, "metadata", &meta)
		if meta.Name == "" {
			d.Errorf(d.Lookup("metadata.name"), "metadata.name", "required")
		}
	}

	if !kindOK || meta.Name == "" {
		return nil, d.Diags
	}
	r := &Resource{APIVersion: api, Kind: kind, Metadata: meta}
	r.Spec, _ = newSpec(kind)
	switch {
	case yamldecode.IsNull(specNode) && (kind == KindPool || kind == KindSecurityGroup || kind == KindIPSet):
		// A pool, an empty security group or an empty IP set named by metadata.name needs no spec.
	case yamldecode.IsNull(specNode):
		d.Errorf(docPos, "spec", "required")
	default:
		d.Decode(specNode, "spec", r.Spec)
	}
	if !d.Has("") {
		d.Fields.Add("", docPos)
	}
	r.Source = Source{File: file, Document: doc.Index, Positions: d.Fields.Fields()}
	for _, e := range d.Diags {
		if e.Severity == diag.Error {
			if r.Source.broken == nil {
				r.Source.broken = map[string]bool{}
			}
			r.Source.broken[e.Field] = true
		}
	}
	return r, d.Diags
}

// scalarField reads a scalar field of a mapping without reporting anything (the full decode does).
func scalarField(d *yamldecode.Decoder, n *yaml.Node, field string) string {
	n = yamldecode.Resolve(n)
	if n == nil || n.Kind != yaml.MappingNode {
		return ""
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := yamldecode.Resolve(n.Content[i]), yamldecode.Resolve(n.Content[i+1])
		if k != nil && k.Kind == yaml.ScalarNode && k.Value == field && v != nil && v.Kind == yaml.ScalarNode && v.Tag != "!!null" {
			return v.Value
		}
	}
	return ""
}
