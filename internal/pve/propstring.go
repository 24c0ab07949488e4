package pve

import (
	"fmt"
	"strconv"
	"strings"
)

// Prop is one key=value of a PVE property string. A leading value without a key (the schema's default
// key, e.g. the volume of a disk) has an empty Key.
type Prop struct {
	Key   string
	Value string
}

// PropertyString is a parsed PVE property string (key=value,key=value; pve-common JSONSchema.pm
// parse_property_string), in its original order.
type PropertyString []Prop

// ParsePropertyString splits a property string. Values cannot contain commas (PVE has no quoting for
// the keys ProxOps reads); an empty element, a repeated key or a second key-less element is an error.
func ParsePropertyString(s string) (PropertyString, error) {
	if s == "" {
		return nil, nil
	}
	var out PropertyString
	seen := map[string]bool{}
	for i, part := range strings.Split(s, ",") {
		if part == "" {
			return nil, fmt.Errorf("property string %q: empty element %d", truncate(s, 80), i+1)
		}
		k, v, ok := strings.Cut(part, "=")
		if !ok {
			k, v = "", part
		}
		if ok && k == "" {
			return nil, fmt.Errorf("property string %q: element %d has an empty key", truncate(s, 80), i+1)
		}
		if seen[k] {
			if k == "" {
				return nil, fmt.Errorf("property string %q: more than one value without a key", truncate(s, 80))
			}
			return nil, fmt.Errorf("property string %q: duplicate key %q", truncate(s, 80), k)
		}
		seen[k] = true
		out = append(out, Prop{Key: k, Value: v})
	}
	return out, nil
}

// Get returns the value of key ("" for the key-less default value).
func (p PropertyString) Get(key string) (string, bool) {
	for _, kv := range p {
		if kv.Key == key {
			return kv.Value, true
		}
	}
	return "", false
}

// ParseSize reads a PVE disk size: a number with an optional K, M, G or T suffix (binary units);
// without a suffix the number is bytes. It returns bytes.
func ParseSize(s string) (int64, error) {
	if s == "" {
		return 0, fmt.Errorf("empty size")
	}
	mult := int64(1)
	switch s[len(s)-1] {
	case 'K', 'k':
		mult = 1 << 10
	case 'M', 'm':
		mult = 1 << 20
	case 'G', 'g':
		mult = 1 << 30
	case 'T', 't':
		mult = 1 << 40
	}
	num := s
	if mult != 1 {
		num = s[:len(s)-1]
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil || f < 0 || num == "" || strings.ContainsAny(num, "eE+-xXpPnN_") {
		return 0, fmt.Errorf("invalid size %q", s)
	}
	b := f * float64(mult)
	if b > 1<<62 {
		return 0, fmt.Errorf("size %q is too large", s)
	}
	return int64(b), nil
}

// SplitTags splits a tags value on PVE's separators (';', ',' and whitespace) and lower-cases each tag.
func SplitTags(s string) []string {
	var out []string
	for _, t := range strings.FieldsFunc(s, func(r rune) bool {
		return r == ';' || r == ',' || r == ' ' || r == '\t' || r == '\n' || r == '\r'
	}) {
		out = append(out, strings.ToLower(t))
	}
	return out
}
