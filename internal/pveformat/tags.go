package pveformat

import (
	"slices"
	"strings"
	"unicode"
)

const (
	// OwnershipTag marks a guest ProxOps created or manages.
	OwnershipTag = "proxops"
	// LegacyTag is the predecessor's ownership tag. A guest carrying only it counts as untagged: it is never
	// pruned and is claimed with OwnershipTag on its first managed update.
	LegacyTag = "pveconform"
)

// SplitList is PVE::Tools::split_list, how PVE splits a list such as a tags value or a delete list: on NUL
// bytes when it holds any, else on `,`, `;` and whitespace.
func SplitList(s string) []string {
	if strings.Contains(s, "\x00") {
		return strings.Split(s, "\x00")
	}
	return strings.FieldsFunc(s, isListSeparator)
}

func isListSeparator(r rune) bool { return r == ';' || r == ',' || unicode.IsSpace(r) }

// NormalizeTags returns tags the way PVE stores them (GuestHelpers::get_unique_tags with the default
// tag-style): each value split with SplitList, lower-cased, sorted and deduplicated. A part of a NUL-separated
// list that still holds a separator (PVE would refuse it as a tag) is split further, so the stored form reads
// back as the same set.
func NormalizeTags(values []string) []string {
	var out []string
	for _, v := range values {
		for _, part := range SplitList(v) {
			for _, t := range strings.FieldsFunc(part, isListSeparator) {
				out = append(out, strings.ToLower(t))
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// ParseTags splits a live tags value on every separator PVE accepts and returns the tags lower-cased,
// sorted and deduplicated.
func ParseTags(s string) []string { return NormalizeTags([]string{s}) }

// FormatTags writes tags the way PVE stores them: lower case, sorted, deduplicated, joined with `;`.
func FormatTags(tags []string) string { return strings.Join(NormalizeTags(tags), ";") }

// HasTag reports whether a live tags value carries a tag (case-insensitive, any separator).
func HasTag(live, tag string) bool {
	_, found := slices.BinarySearch(ParseTags(live), strings.ToLower(tag))
	return found
}

// Owned reports whether a live tags value carries the ownership tag.
func Owned(live string) bool { return HasTag(live, OwnershipTag) }

// SameTags reports whether two tag values hold the same set of tags.
func SameTags(a, b string) bool { return slices.Equal(ParseTags(a), ParseTags(b)) }

// TagStyle is how a cluster stores tags (datacenter.cfg tag-style). The zero value is PVE's default:
// tags lower-cased. With CaseSensitive (case-sensitive=1) PVE keeps their case, deduplicates them exactly
// and sorts them by byte.
type TagStyle struct {
	CaseSensitive bool
}

// Normalize returns tags the way PVE stores them under the style: split with SplitList (and further on
// separators), lower-cased unless case-sensitive, sorted and deduplicated.
func (s TagStyle) Normalize(values []string) []string {
	if !s.CaseSensitive {
		return NormalizeTags(values)
	}
	var out []string
	for _, v := range values {
		for _, part := range SplitList(v) {
			out = append(out, strings.FieldsFunc(part, isListSeparator)...)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// Parse splits a live tags value the way PVE stores it under the style.
func (s TagStyle) Parse(live string) []string { return s.Normalize([]string{live}) }

// Format writes tags the way PVE stores them under the style, joined with `;`.
func (s TagStyle) Format(tags []string) string { return strings.Join(s.Normalize(tags), ";") }

// Same reports whether two tag values hold the same set of tags under the style.
func (s TagStyle) Same(a, b string) bool { return slices.Equal(s.Parse(a), s.Parse(b)) }
