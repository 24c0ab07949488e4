package pvesim

import (
	"strings"
	"unicode/utf8"
)

// Checks that run on every request, byte by byte rather than with regular expressions. Each accepts
// exactly the language written beside it (TestLexicalChecksAcceptTheirRegularLanguage compares them).

// allDigits: ^\d+$ (ASCII digits, as Perl's \d on PVE's inputs and Go's \d).
func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

func trimSign(s string) string {
	if s != "" && (s[0] == '+' || s[0] == '-') {
		return s[1:]
	}
	return s
}

// isInteger is JSONSchema's integer check: ^[+-]?\d+$
func isInteger(s string) bool { return allDigits(trimSign(s)) }

// isNumber is JSONSchema's number check: ^[+-]?(\d+\.\d+|\d+\.|\.\d+|\d+)([eE][+-]?\d+)?$
func isNumber(s string) bool {
	s = trimSign(s)
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	digits := i
	if i < len(s) && s[i] == '.' {
		i++
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
			digits++
		}
	}
	if digits == 0 {
		return false
	}
	rest := s[i:]
	if rest == "" {
		return true
	}
	if rest[0] != 'e' && rest[0] != 'E' {
		return false
	}
	return allDigits(trimSign(rest[1:]))
}

// keyValue splits one part of a property string as JSONSchema's parse_property_string does: ^([^=]+)=(.+)$ —
// a key without '=' before the first '=', and a value that is not empty and (like Perl's "." without /s,
// and Go's) holds no newline.
func keyValue(part string) (string, string, bool) {
	i := strings.IndexByte(part, '=')
	if i <= 0 || i == len(part)-1 || strings.IndexByte(part[i+1:], '\n') >= 0 {
		return "", "", false
	}
	return part[:i], part[i+1:], true
}

// smallIndex reports whether s is a decimal index from 0 to upTo (at most 99) written without a leading zero.
func smallIndex(s string, upTo int) bool {
	if !allDigits(s) || len(s) > 2 || len(s) == 2 && s[0] == '0' {
		return false
	}
	n := int(s[0] - '0')
	if len(s) == 2 {
		n = n*10 + int(s[1]-'0')
	}
	return n <= upTo
}

// tokenHeader finds the API token of an Authorization header as pve-http-server reads it:
// (?:^|\s)PVEAPIToken(?:=| )([^;]*) — the first "PVEAPIToken" at the start or after white space and
// followed by '=' or ' ', and what follows up to the next ';'.
func tokenHeader(h string) (string, bool) {
	const word = "PVEAPIToken"
	for from := 0; ; {
		i := strings.Index(h[from:], word)
		if i < 0 {
			return "", false
		}
		i += from
		end := i + len(word)
		if (i == 0 || isRegexpSpace(h[i-1])) && end < len(h) && (h[end] == '=' || h[end] == ' ') {
			v := h[end+1:]
			if j := strings.IndexByte(v, ';'); j >= 0 {
				v = v[:j]
			}
			return v, true
		}
		from = i + 1
	}
}

// isRegexpSpace is \s of Go's regular expressions: [\t\n\f\r ].
func isRegexpSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\f' || c == '\r'
}

// safeReason makes a reason phrase printable ASCII: each character outside ' '..'~' (a byte of invalid
// UTF-8 counting as one) becomes a space, as replacing [^\x20-\x7e] with " " does.
func safeReason(s string) string {
	i := 0
	for i < len(s) && s[i] >= 0x20 && s[i] <= 0x7e {
		i++
	}
	if i == len(s) {
		return s
	}
	var b strings.Builder
	b.WriteString(s[:i])
	for i < len(s) {
		if c := s[i]; c >= 0x20 && c <= 0x7e {
			b.WriteByte(c)
			i++
			continue
		}
		_, n := utf8.DecodeRuneInString(s[i:])
		b.WriteByte(' ')
		i += n
	}
	return b.String()
}
