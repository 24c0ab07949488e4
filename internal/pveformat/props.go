package pveformat

import (
	"slices"
	"strings"
)

// Token is one element of a property string: key=value, or a bare value for the format's default key
// (Key is then that default key and Bare is true).
type Token struct {
	Key   string
	Value string
	// Bare records that the token was written without "key=" (a default key, or a flag with no value).
	Bare bool
}

// Props is a parsed property string (comma-separated key=value pairs), in the order it was written.
type Props []Token

// ParseProps splits a property string the way PVE's parse_property_string does: on commas, each element
// key=value; an element without "=" is the value of defaultKey when that key has not been seen yet, else
// it is kept as a bare key with an empty value. Empty elements are dropped.
func ParseProps(s, defaultKey string) Props {
	if s == "" {
		return nil
	}
	var out Props
	seenDefault := false
	for part := range strings.SplitSeq(s, ",") {
		if part == "" {
			continue
		}
		k, v, ok := strings.Cut(part, "=")
		switch {
		case ok:
			if k == defaultKey {
				seenDefault = true
			}
			out = append(out, Token{Key: k, Value: v})
		case defaultKey != "" && !seenDefault:
			seenDefault = true
			out = append(out, Token{Key: defaultKey, Value: part, Bare: true})
		default:
			out = append(out, Token{Key: part, Bare: true})
		}
	}
	return out
}

// Get returns the value of the first token with a key.
func (p Props) Get(key string) (string, bool) {
	for _, t := range p {
		if t.Key == key {
			return t.Value, true
		}
	}
	return "", false
}

// Value returns the value of a key, "" when absent.
func (p Props) Value(key string) string {
	v, _ := p.Get(key)
	return v
}

// Has reports whether a key is present.
func (p Props) Has(key string) bool {
	_, ok := p.Get(key)
	return ok
}

// With returns a copy with key set to value: the first token with the key is replaced (later duplicates
// are dropped), or the token is appended.
func (p Props) With(key, value string) Props {
	out := make(Props, 0, len(p)+1)
	done := false
	for _, t := range p {
		if t.Key != key {
			out = append(out, t)
			continue
		}
		if !done {
			out = append(out, Token{Key: key, Value: value})
			done = true
		}
	}
	if !done {
		out = append(out, Token{Key: key, Value: value})
	}
	return out
}

// Without returns a copy without the tokens of the given keys.
func (p Props) Without(keys ...string) Props {
	out := make(Props, 0, len(p))
	for _, t := range p {
		if !slices.Contains(keys, t.Key) {
			out = append(out, t)
		}
	}
	return out
}

// Canonical prints the property string the way PVE stores it (print_property_string): the default key's
// value first without "key=", then the keys listed in first (in that order), then every other key sorted.
// Tokens without a value that were bare flags are printed bare.
func (p Props) Canonical(defaultKey string, first ...string) string {
	var b strings.Builder
	write := func(t Token, asDefault bool) {
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		// A default value that would not read back bare (empty, or holding '=') keeps its key.
		if asDefault && t.Value != "" && !strings.Contains(t.Value, "=") {
			b.WriteString(t.Value)
			return
		}
		b.WriteString(t.Key)
		if !(t.Bare && t.Value == "") {
			b.WriteByte('=')
			b.WriteString(t.Value)
		}
	}
	used := make([]bool, len(p))
	emit := func(key string, asDefault bool) {
		for i, t := range p {
			if !used[i] && t.Key == key {
				used[i] = true
				write(t, asDefault)
				return
			}
		}
	}
	if defaultKey != "" {
		emit(defaultKey, true)
	}
	for _, k := range first {
		emit(k, false)
	}
	rest := make([]int, 0, len(p))
	for i := range p {
		if !used[i] {
			rest = append(rest, i)
		}
	}
	slices.SortStableFunc(rest, func(a, b int) int { return strings.Compare(p[a].Key, p[b].Key) })
	for _, i := range rest {
		write(p[i], false)
	}
	return b.String()
}

// Keys returns the keys of the tokens in order.
func (p Props) Keys() []string {
	out := make([]string, len(p))
	for i, t := range p {
		out[i] = t.Key
	}
	return out
}
