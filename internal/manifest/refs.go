package manifest

import (
	"regexp"
	"strings"

	"github.com/proxops/proxops/internal/yamldecode"
)

// Reference is a dependency of one resource on another.
type Reference struct {
	// Field is the path of the field that makes the reference (spec.clone, spec.disks[0].image,
	// metadata.annotations.proxops/depends-on).
	Field  string
	Target Ref
	// Annotation is true for a proxops/depends-on entry: an ordering edge only, with no placement rule.
	Annotation bool
}

// FieldDependsOn is the field path of the depends-on annotation.
const FieldDependsOn = "metadata.annotations." + AnnotationDependsOn

var dependsOnRE = regexp.MustCompile(`^[A-Za-z]+:[A-Za-z0-9._-]+$`)

// ParseDependsOn parses a proxops/depends-on value: comma-separated Kind:name tokens, whitespace trimmed,
// kinds spelled any accepted way. Empty tokens are skipped; malformed ones are returned in bad.
func ParseDependsOn(v string) (refs []Ref, bad []string) {
	for _, tok := range strings.Split(v, ",") {
		tok = strings.TrimSpace(tok)
		if tok == "" {
			continue
		}
		if !dependsOnRE.MatchString(tok) {
			bad = append(bad, tok)
			continue
		}
		k, name, _ := strings.Cut(tok, ":")
		kind, ok := ParseKind(k)
		if !ok {
			bad = append(bad, tok)
			continue
		}
		refs = append(refs, Ref{Kind: kind, Name: name})
	}
	return refs, bad
}

// References lists the resources r depends on, in field order: the structured provisioning references
// (VM and TemplateVM: cdrom ISO, disk images, clone source; LXC and TemplateCT: CTTemplate) and then the
// proxops/depends-on entries.
func (r *Resource) References() []Reference {
	var out []Reference
	switch s := r.Spec.(type) {
	case *VMSpec:
		if s.Clone != "" && r.Kind == KindVM {
			out = append(out, Reference{Field: "spec.clone", Target: Ref{Kind: KindTemplateVM, Name: s.Clone}})
		}
		for i, d := range s.Disks {
			if d.Image != "" {
				out = append(out, Reference{Field: yamldecode.Index("spec.disks", i) + ".image", Target: Ref{Kind: KindDiskImage, Name: d.Image}})
			}
		}
		if h := s.Hardware; h != nil && h.CDROM != nil && h.CDROM.ISO != "" && h.CDROM.ISO != CDROMNone {
			out = append(out, Reference{Field: "spec.hardware.cdrom.iso", Target: Ref{Kind: KindISO, Name: h.CDROM.ISO}})
		}
	case *LXCSpec:
		if s.Template != "" {
			out = append(out, Reference{Field: "spec.template", Target: Ref{Kind: KindCTTemplate, Name: s.Template}})
		}
	}
	if v, ok := r.Metadata.Annotations[AnnotationDependsOn]; ok {
		refs, _ := ParseDependsOn(v)
		for _, t := range refs {
			out = append(out, Reference{Field: FieldDependsOn, Target: t, Annotation: true})
		}
	}
	return out
}
