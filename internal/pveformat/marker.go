package pveformat

import "strings"

// OwnershipMarker marks, in its comment, a cluster object ProxOps created or claimed (a pool, and the other
// objects PVE cannot tag). It is a word of its own, printed at the end of the comment, so a person reads it
// and may edit the rest of the comment around it.
const OwnershipMarker = "[proxops]"

// Marked reports whether a comment carries the ownership marker as a word of its own, wherever it stands.
func Marked(comment string) bool {
	for _, line := range strings.Split(comment, "\n") {
		for _, f := range strings.Fields(line) {
			if f == OwnershipMarker {
				return true
			}
		}
	}
	return false
}

// CommentText is a comment without its ownership marker: what a manifest's comment is compared with. Every
// occurrence of the marker word is dropped, a line left empty by it is dropped, and the spaces around it and
// at the end are trimmed; the rest of the comment is kept as it is.
func CommentText(comment string) string {
	if !Marked(comment) {
		return strings.TrimRight(comment, " \t\r\n")
	}
	var out []string
	for _, line := range strings.Split(comment, "\n") {
		fields := strings.Fields(line)
		kept := fields[:0:0]
		for _, f := range fields {
			if f != OwnershipMarker {
				kept = append(kept, f)
			}
		}
		switch {
		case len(kept) == len(fields):
			out = append(out, line)
		case len(kept) > 0:
			out = append(out, strings.Join(kept, " "))
		}
	}
	return strings.TrimRight(strings.Join(out, "\n"), " \t\r\n")
}

// MarkComment is the comment ProxOps writes for an object it owns: the text, then the marker.
// CommentText(MarkComment(t)) == t for any t without the marker word and without trailing spaces.
func MarkComment(text string) string {
	text = CommentText(text)
	if text == "" {
		return OwnershipMarker
	}
	return text + " " + OwnershipMarker
}
