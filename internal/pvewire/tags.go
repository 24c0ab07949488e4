package pvewire

import (
	"slices"

	"github.com/proxops/proxops/internal/pveformat"
)

// DesiredTags returns the tag set a guest must carry. With declared tags it is exactly them plus the
// ownership tag; without, the live tags are kept (minus the legacy tag, which the ownership tag replaces)
// and the ownership tag is added. The result is in PVE's stored form.
func DesiredTags(declared []string, live string) string {
	return DesiredTagsIn(pveformat.TagStyle{}, declared, live)
}

// DesiredTagsIn is DesiredTags for a cluster whose tag-style is style: with case-sensitive, tags keep
// their case.
func DesiredTagsIn(style pveformat.TagStyle, declared []string, live string) string {
	var tags []string
	if len(declared) > 0 {
		tags = slices.Clone(declared)
	} else {
		for _, t := range style.Parse(live) {
			if t != pveformat.LegacyTag {
				tags = append(tags, t)
			}
		}
	}
	return style.Format(append(tags, pveformat.OwnershipTag))
}
