package diag

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// MaxExcerpt is the most characters of a value a diagnostic quotes, escapes included.
const MaxExcerpt = 40

// Excerpt quotes a value read from a repository for a diagnostic: in double quotes, with every
// non-printable character and invalid byte escaped as Go escapes them, and cut to MaxExcerpt characters,
// followed by an ellipsis when cut. Every diagnostic that quotes what a file says goes through Excerpt, so
// no diagnostic carries more than a short, printable piece of a file.
func Excerpt(v string) string {
	var b strings.Builder
	b.WriteByte('"')
	n := 0
	for i := 0; i < len(v); {
		_, size := utf8.DecodeRuneInString(v[i:])
		q := strconv.Quote(v[i : i+size])
		piece := q[1 : len(q)-1]
		w := utf8.RuneCountInString(piece)
		if n+w > MaxExcerpt {
			b.WriteString(`"…`)
			return b.String()
		}
		b.WriteString(piece)
		n += w
		i += size
	}
	b.WriteByte('"')
	return b.String()
}
