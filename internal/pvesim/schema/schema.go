// Package schema holds the trimmed official PVE API schema the simulator validates requests against, and
// the Go types to read it. The data is Proxmox's (AGPL-3.0-or-later, see NOTICE); refresh it with gen.
package schema

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
)

//go:embed apidoc-trim.json
var trimmed []byte

// Method is one API method: its path template (e.g. /nodes/{node}/qemu), HTTP method and parameters.
type Method struct {
	Path       string `json:"path"`
	Method     string `json:"method"`
	Name       string `json:"name"`
	AllowToken *int   `json:"allowtoken"`
	Protected  int    `json:"protected"`
	ProxyTo    string `json:"proxyto"`
	Parameters *Prop  `json:"parameters"`
}

// TokensAllowed reports whether API tokens may call the method (allowtoken defaults to 1).
func (m *Method) TokensAllowed() bool { return m.AllowToken == nil || *m.AllowToken != 0 }

// Prop is a JSON-schema property as PVE's JSONSchema.pm understands it.
type Prop struct {
	Type                 string           `json:"type"`
	Optional             Flag             `json:"optional"`
	Default              any              `json:"default"`
	Enum                 []string         `json:"enum"`
	Pattern              string           `json:"pattern"`
	Minimum              *float64         `json:"-"`
	Maximum              *float64         `json:"-"`
	MinLength            *int             `json:"minLength"`
	MaxLength            *int             `json:"maxLength"`
	Format               string           `json:"-"` // a named format, e.g. pve-vmid or pve-configid-list
	FormatObject         map[string]*Prop `json:"-"` // a property-string sub-schema
	Alias                string           `json:"alias"`
	KeyAlias             string           `json:"keyAlias"`
	DefaultKey           Flag             `json:"default_key"`
	Requires             string           `json:"-"`
	Items                *Prop            `json:"items"`
	Properties           map[string]*Prop `json:"properties"`
	AdditionalProperties *Flag            `json:"additionalProperties"`
	TypeText             string           `json:"typetext"`
}

// Flag is a Perl-style boolean (0/1, sometimes a string).
type Flag bool

// UnmarshalJSON accepts 0/1, "0"/"1" and JSON booleans.
func (f *Flag) UnmarshalJSON(b []byte) error {
	s := string(b)
	switch s {
	case "1", `"1"`, "true":
		*f = true
	case "0", `"0"`, "false", "null", `""`:
		*f = false
	default:
		// additionalProperties may be a schema object: treat as allowed.
		*f = true
	}
	return nil
}

// UnmarshalJSON handles the fields whose JSON type varies (format, minimum, maximum, requires).
func (p *Prop) UnmarshalJSON(b []byte) error {
	type plain Prop
	var aux struct {
		plain
		Format   json.RawMessage `json:"format"`
		Minimum  json.RawMessage `json:"minimum"`
		Maximum  json.RawMessage `json:"maximum"`
		Requires json.RawMessage `json:"requires"`
		Enum     []any           `json:"enum"`
		Type     json.RawMessage `json:"type"`
	}
	if err := json.Unmarshal(b, &aux); err != nil {
		return err
	}
	*p = Prop(aux.plain)
	p.Enum = nil
	for _, e := range aux.Enum {
		p.Enum = append(p.Enum, fmt.Sprint(e))
	}
	if len(aux.Type) > 0 && aux.Type[0] == '"' {
		_ = json.Unmarshal(aux.Type, &p.Type)
	}
	if len(aux.Format) > 0 {
		switch aux.Format[0] {
		case '"':
			_ = json.Unmarshal(aux.Format, &p.Format)
		case '{':
			if err := json.Unmarshal(aux.Format, &p.FormatObject); err != nil {
				return fmt.Errorf("format object: %w", err)
			}
		}
	}
	if len(aux.Requires) > 0 && aux.Requires[0] == '"' {
		_ = json.Unmarshal(aux.Requires, &p.Requires)
	}
	p.Minimum = number(aux.Minimum)
	p.Maximum = number(aux.Maximum)
	return nil
}

func number(raw json.RawMessage) *float64 {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	s := string(raw)
	if s[0] == '"' {
		_ = json.Unmarshal(raw, &s)
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return nil
	}
	return &f
}

// Schema indexes the served methods by path template and HTTP method.
type Schema struct {
	methods map[string]map[string]*Method
	paths   []string
}

// Load parses the embedded trimmed schema.
func Load() (*Schema, error) {
	var list []*Method
	if err := json.Unmarshal(trimmed, &list); err != nil {
		return nil, fmt.Errorf("parse embedded schema: %w", err)
	}
	s := &Schema{methods: map[string]map[string]*Method{}}
	for _, m := range list {
		if s.methods[m.Path] == nil {
			s.methods[m.Path] = map[string]*Method{}
			s.paths = append(s.paths, m.Path)
		}
		s.methods[m.Path][m.Method] = m
	}
	sort.Strings(s.paths)
	return s, nil
}

// Method returns the schema of path template and HTTP method, or nil.
func (s *Schema) Method(path, method string) *Method {
	return s.methods[path][method]
}

// Paths lists the path templates in sorted order.
func (s *Schema) Paths() []string { return append([]string(nil), s.paths...) }

// Methods lists the HTTP methods served on a path template, sorted.
func (s *Schema) Methods(path string) []string {
	var out []string
	for m := range s.methods[path] {
		out = append(out, m)
	}
	sort.Strings(out)
	return out
}
