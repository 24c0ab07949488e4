package pvewire

import (
	"slices"
	"strings"

	"github.com/proxops/proxops/internal/manifest"
)

const (
	// OwnershipTag marks a guest ProxOps created or manages.
	OwnershipTag = "proxops"
	// LegacyTag is the predecessor's ownership tag. A guest carrying only it counts as untagged: it is never
	// pruned and is claimed with OwnershipTag on its first managed update.
	LegacyTag = "pveconform"
)

// ParseTags splits a live tags value on every separator PVE accepts (`;`, `,`, whitespace) and returns the
// tags lower-cased, sorted and deduplicated.
func ParseTags(s string) []string { return manifest.NormalizeTags([]string{s}) }

// FormatTags writes tags the way PVE stores them: lower case, sorted, deduplicated, joined with `;`.
func FormatTags(tags []string) string { return strings.Join(manifest.NormalizeTags(tags), ";") }

// HasTag reports whether a live tags value carries a tag (case-insensitive, any separator).
func HasTag(live, tag string) bool {
	_, found := slices.BinarySearch(ParseTags(live), strings.ToLower(tag))
	return found
}

// Owned reports whether a live tags value carries the ownership tag.
func Owned(live string) bool { return HasTag(live, OwnershipTag) }

// DesiredTags returns the tag set a guest must carry. With declared tags it is exactly them plus the
// ownership tag; without, the live tags are kept (minus the legacy tag, which the ownership tag replaces)
// and the ownership tag is added. The result is in PVE's stored form.
func DesiredTags(declared []string, live string) string {
	var tags []string
	if len(declared) > 0 {
		tags = slices.Clone(declared)
	} else {
		for _, t := range ParseTags(live) {
			if t != LegacyTag {
				tags = append(tags, t)
			}
		}
	}
	return FormatTags(append(tags, OwnershipTag))
}

// SameTags reports whether two tag values hold the same set of tags.
func SameTags(a, b string) bool { return slices.Equal(ParseTags(a), ParseTags(b)) }
