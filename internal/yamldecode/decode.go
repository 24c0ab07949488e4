// Package yamldecode decodes YAML node trees into Go values by their yaml struct tags. Unlike a plain
// unmarshal it never stops at the first problem: every type mismatch, duplicate key and unknown field is
// reported as a diagnostic with its file, line and column, and the position of every decoded field is kept
// so later validation can point at it. Unknown fields are warnings that name the field probably meant.
package yamldecode

import (
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/proxops/proxops/internal/diag"
)

// Pos is a 1-based line and column in a file; zero when unknown.
type Pos struct {
	Line   int
	Column int
}

// Of returns the position of a YAML node.
func Of(n *yaml.Node) Pos {
	if n == nil {
		return Pos{}
	}
	return Pos{Line: n.Line, Column: n.Column}
}

// Positions maps a dotted field path (spec.disks[0].size) to the position of its value: the value itself
// for a scalar, the key for a mapping or a list, the item for a list item.
type Positions map[string]Pos

// Lookup returns the position of path, or of its nearest ancestor that has one.
func (p Positions) Lookup(path string) Pos {
	for {
		if pos, ok := p[path]; ok {
			return pos
		}
		if path == "" {
			return Pos{}
		}
		path = Parent(path)
	}
}

// Parent returns the path of the field that holds path ("" for a top-level field).
func Parent(path string) string {
	if strings.HasSuffix(path, "]") {
		if i := strings.LastIndexByte(path, '['); i >= 0 {
			return path[:i]
		}
	}
	if i := strings.LastIndexByte(path, '.'); i >= 0 {
		return path[:i]
	}
	return ""
}

// Join appends a field name to a path.
func Join(path, field string) string {
	if path == "" {
		return field
	}
	return path + "." + field
}

// Index appends a list index to a path.
func Index(path string, i int) string {
	return path + "[" + strconv.Itoa(i) + "]"
}

// maxVisits bounds the work spent on one document, so alias expansion cannot blow up.
const maxVisits = 1 << 18

// Decoder decodes nodes of one file, collecting positions and diagnostics.
type Decoder struct {
	// File is the slash-separated path diagnostics name.
	File string
	// Ref is the resource (Kind/name) diagnostics name, when known.
	Ref string
	// Positions receives the position of every decoded field, when not nil.
	Positions Positions
	// Fields receives the position of every decoded field compactly, when not nil.
	Fields *FieldsBuilder
	// Diags receives every problem found.
	Diags  diag.List
	visits int
	errors int
}

// NewDecoder returns a decoder for a file that records positions in a map (Positions).
func NewDecoder(file string) *Decoder {
	return &Decoder{File: file, Positions: make(Positions, 48)}
}

// NewCompactDecoder returns a decoder for a file that records positions compactly (Fields), for values
// that keep their positions while many of them are held at once.
func NewCompactDecoder(file string) *Decoder {
	return &Decoder{File: file, Fields: &FieldsBuilder{}}
}

// Lookup returns the position recorded for path, or for its nearest ancestor, so far.
func (d *Decoder) Lookup(path string) Pos {
	if d.Positions != nil {
		return d.Positions.Lookup(path)
	}
	if d.Fields != nil {
		return d.Fields.Lookup(path)
	}
	return Pos{}
}

// Has reports whether a position was recorded for exactly path so far.
func (d *Decoder) Has(path string) bool {
	if d.Positions != nil {
		_, ok := d.Positions[path]
		return ok
	}
	return d.Fields != nil && d.Fields.Has(path)
}

// setPos records the position of path.
func (d *Decoder) setPos(path string, pos Pos) {
	if d.Positions != nil {
		d.Positions[path] = pos
	}
	if d.Fields != nil {
		d.Fields.Add(path, pos)
	}
}

// Errorf records an error about path at pos.
func (d *Decoder) Errorf(pos Pos, path, format string, args ...any) {
	d.add(diag.Error, pos, path, fmt.Sprintf(format, args...))
}

// Warnf records a warning about path at pos.
func (d *Decoder) Warnf(pos Pos, path, format string, args ...any) {
	d.add(diag.Warning, pos, path, fmt.Sprintf(format, args...))
}

// ErrorCount returns the number of errors recorded so far.
func (d *Decoder) ErrorCount() int { return d.errors }

func (d *Decoder) add(sev diag.Severity, pos Pos, path, msg string) {
	if sev == diag.Error {
		d.errors++
	}
	d.Diags = append(d.Diags, diag.Diagnostic{
		Severity: sev, File: d.File, Line: pos.Line, Column: pos.Column, Ref: d.Ref, Field: path, Message: msg,
	})
}

// Resolve follows aliases and unwraps document nodes.
func Resolve(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && i < 64; i++ {
		switch {
		case n.Kind == yaml.AliasNode:
			n = n.Alias
		case n.Kind == yaml.DocumentNode && len(n.Content) == 1:
			n = n.Content[0]
		default:
			return n
		}
	}
	return n
}

// IsNull reports whether a node is absent or an explicit null.
func IsNull(n *yaml.Node) bool {
	n = Resolve(n)
	return n == nil || (n.Kind == yaml.ScalarNode && n.Tag == "!!null") || n.Kind == 0
}

// Pair is one key and value of a mapping.
type Pair struct {
	Key   *yaml.Node
	Value *yaml.Node
}

// Pairs returns the key/value pairs of a mapping with YAML merge keys (<<) expanded: merged pairs come
// first and are overridden by the mapping's own keys. Keys that are defined twice are reported, and so is a
// merge that includes itself.
func (d *Decoder) Pairs(n *yaml.Node, path string) []Pair {
	return d.pairs(n, path, nil)
}

// maxMergeDepth bounds nested merge keys.
const maxMergeDepth = 16

func (d *Decoder) pairs(n *yaml.Node, path string, merging []*yaml.Node) []Pair {
	n = Resolve(n)
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	var own, merged []Pair
	for i := 0; i+1 < len(n.Content); i += 2 {
		d.visits++
		if d.visits > maxVisits {
			if d.visits == maxVisits+1 {
				d.Errorf(Of(n), path, "document is too large or expands too many aliases")
			}
			return nil
		}
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind == yaml.ScalarNode && k.Tag == "!!merge" {
			for _, src := range mergeSources(v) {
				src = Resolve(src)
				if src == n || slices.Contains(merging, src) || len(merging) >= maxMergeDepth {
					d.Errorf(Of(k), path, "merge key includes itself or nests too deeply")
					continue
				}
				merged = append(merged, d.pairs(src, path, append(merging, n))...)
			}
			continue
		}
		own = append(own, Pair{Key: k, Value: v})
	}
	seen := make(map[string]*yaml.Node, len(own))
	out := make([]Pair, 0, len(own)+len(merged))
	for _, p := range own {
		key := Resolve(p.Key)
		if key != nil && key.Kind == yaml.ScalarNode {
			if first, dup := seen[key.Value]; dup {
				d.Errorf(Of(key), Join(path, key.Value), "defined twice (first at line %d)", first.Line)
				continue
			}
			seen[key.Value] = key
		}
		out = append(out, p)
	}
	for _, p := range merged {
		key := Resolve(p.Key)
		if key != nil && key.Kind == yaml.ScalarNode {
			if _, dup := seen[key.Value]; dup {
				continue
			}
			seen[key.Value] = key
		}
		out = append(out, p)
	}
	return out
}

func mergeSources(v *yaml.Node) []*yaml.Node {
	v = Resolve(v)
	if v == nil {
		return nil
	}
	if v.Kind == yaml.SequenceNode {
		return v.Content
	}
	return []*yaml.Node{v}
}

// Decode decodes n into the value out points to. path names the value in diagnostics.
func (d *Decoder) Decode(n *yaml.Node, path string, out any) {
	v := reflect.ValueOf(out)
	if v.Kind() != reflect.Pointer || v.IsNil() {
		d.Errorf(Of(n), path, "internal error: decode target is not a pointer")
		return
	}
	d.decode(n, path, v.Elem())
}

var durationType = reflect.TypeOf(time.Duration(0))

func (d *Decoder) decode(n *yaml.Node, path string, v reflect.Value) {
	d.visits++
	if d.visits > maxVisits {
		if d.visits == maxVisits+1 {
			d.Errorf(Of(n), path, "document is too large or expands too many aliases")
		}
		return
	}
	n = Resolve(n)
	if IsNull(n) {
		return
	}
	if v.Type() == durationType {
		d.duration(n, path, v)
		return
	}
	switch v.Kind() {
	case reflect.Pointer:
		elem := reflect.New(v.Type().Elem())
		before := d.errors
		d.decode(n, path, elem.Elem())
		if d.errors == before || v.Type().Elem().Kind() == reflect.Struct {
			v.Set(elem)
		}
	case reflect.Struct:
		d.structure(n, path, v)
	case reflect.Slice:
		d.list(n, path, v)
	case reflect.Map:
		d.mapping(n, path, v)
	case reflect.String:
		if s, ok := d.Scalar(n, path, "a string"); ok {
			v.SetString(share(s))
		}
	case reflect.Int, reflect.Int64, reflect.Int32:
		if i, ok := d.Int(n, path); ok {
			if v.OverflowInt(i) {
				d.Errorf(Of(n), path, "integer %s is out of range", diag.Excerpt(n.Value))
				return
			}
			v.SetInt(i)
		}
	case reflect.Bool:
		if b, ok := d.Bool(n, path); ok {
			v.SetBool(b)
		}
	default:
		d.Errorf(Of(n), path, "internal error: cannot decode into %s", v.Type())
	}
}

// Describe names the shape of a node for messages, quoting a scalar's value as diag.Excerpt does.
func Describe(n *yaml.Node) string {
	if n != nil && n.Kind == yaml.ScalarNode {
		return diag.Excerpt(n.Value)
	}
	return Shape(n)
}

// Shape names the shape of a node for messages without its value. A document whose root is a scalar is
// most likely not YAML written for ProxOps at all (a key, a token, an environment file): its messages use
// Shape, so nothing of such a file is quoted.
func Shape(n *yaml.Node) string {
	if n == nil {
		return "nothing"
	}
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		return "a scalar value"
	default:
		return "nothing"
	}
}

// Scalar returns the text of a scalar node, reporting anything else.
func (d *Decoder) Scalar(n *yaml.Node, path, want string) (string, bool) {
	n = Resolve(n)
	if n == nil || n.Kind != yaml.ScalarNode {
		if n != nil {
			d.Errorf(Of(n), path, "expected %s, got %s", want, Describe(n))
		}
		return "", false
	}
	if n.Tag == binaryTag {
		d.Errorf(Of(n), path, "expected %s, got binary data (a %s value): the files hold text", want, binaryTag)
		return "", false
	}
	return n.Value, true
}

// binaryTag is YAML's tag of base64-encoded binary data, which no field of a file ProxOps reads holds.
const binaryTag = "!!binary"

// Int returns the integer value of a scalar node.
func (d *Decoder) Int(n *yaml.Node, path string) (int64, bool) {
	s, ok := d.Scalar(n, path, "an integer")
	if !ok {
		return 0, false
	}
	if n.Tag != "!!int" {
		d.Errorf(Of(n), path, "expected an integer, got %s", Describe(n))
		return 0, false
	}
	i, err := strconv.ParseInt(strings.ReplaceAll(s, "_", ""), 0, 64)
	if err != nil {
		d.Errorf(Of(n), path, "integer %s is out of range", diag.Excerpt(s))
		return 0, false
	}
	return i, true
}

// Bool returns the value of a boolean scalar: true or false, and YAML 1.1's yes/no/on/off words.
func (d *Decoder) Bool(n *yaml.Node, path string) (bool, bool) {
	s, ok := d.Scalar(n, path, "true or false")
	if !ok {
		return false, false
	}
	if n.Tag == "!!bool" {
		return strings.EqualFold(s, "true"), true
	}
	if n.Tag == "!!str" && n.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle) == 0 {
		switch s {
		case "y", "Y", "yes", "Yes", "YES", "on", "On", "ON":
			return true, true
		case "n", "N", "no", "No", "NO", "off", "Off", "OFF":
			return false, true
		}
	}
	d.Errorf(Of(n), path, "expected true or false, got %s", Describe(n))
	return false, false
}

func (d *Decoder) duration(n *yaml.Node, path string, v reflect.Value) {
	s, ok := d.Scalar(n, path, "a duration such as 30s or 5m")
	if !ok {
		return
	}
	dur, err := time.ParseDuration(s)
	if err != nil {
		d.Errorf(Of(n), path, "expected a duration such as 30s or 5m, got %s", diag.Excerpt(s))
		return
	}
	v.SetInt(int64(dur))
}

func (d *Decoder) structure(n *yaml.Node, path string, v reflect.Value) {
	if n.Kind != yaml.MappingNode {
		d.Errorf(Of(n), path, "expected a mapping, got %s", Describe(n))
		return
	}
	info := fieldsOf(v.Type())
	for _, p := range d.Pairs(n, path) {
		key, ok := d.Scalar(p.Key, path, "a field name")
		if !ok {
			continue
		}
		fpath := Join(path, key)
		idx, known := info.byName[key]
		if !known {
			d.Unknown(p.Key, fpath, info.names)
			continue
		}
		d.Record(fpath, p.Key, p.Value)
		d.decode(p.Value, fpath, v.Field(idx))
	}
}

// Record stores the position of a field: the value for a scalar, else the key.
func (d *Decoder) Record(path string, key, value *yaml.Node) {
	if value != nil && value.Kind == yaml.ScalarNode {
		d.setPos(path, Of(value))
		return
	}
	d.setPos(path, Of(key))
}

// Unknown reports a field that is not part of the schema, naming the closest known field.
func (d *Decoder) Unknown(key *yaml.Node, path string, known []string) {
	name := key.Value
	if s := Suggest(name, known); s != "" {
		d.Warnf(Of(key), path, "unknown field; did you mean %s?", diag.Excerpt(s))
		return
	}
	d.Warnf(Of(key), path, "unknown field")
}

func (d *Decoder) list(n *yaml.Node, path string, v reflect.Value) {
	if n.Kind != yaml.SequenceNode {
		d.Errorf(Of(n), path, "expected a list, got %s", Describe(n))
		return
	}
	s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
	for i, item := range n.Content {
		ipath := Index(path, i)
		d.setPos(ipath, Of(Resolve(item)))
		d.decode(item, ipath, s.Index(i))
	}
	v.Set(s)
}

func (d *Decoder) mapping(n *yaml.Node, path string, v reflect.Value) {
	if v.Type().Key().Kind() != reflect.String {
		d.Errorf(Of(n), path, "internal error: map key is not a string")
		return
	}
	if n.Kind != yaml.MappingNode {
		d.Errorf(Of(n), path, "expected a mapping, got %s", Describe(n))
		return
	}
	m := reflect.MakeMap(v.Type())
	for _, p := range d.Pairs(n, path) {
		key, ok := d.Scalar(p.Key, path, "a key")
		if !ok {
			continue
		}
		fpath := Join(path, key)
		d.Record(fpath, p.Key, p.Value)
		elem := reflect.New(v.Type().Elem()).Elem()
		d.decode(p.Value, fpath, elem)
		m.SetMapIndex(reflect.ValueOf(share(key)).Convert(v.Type().Key()), elem)
	}
	v.Set(m)
}

type structInfo struct {
	byName map[string]int
	names  []string
}

var structCache sync.Map // reflect.Type → *structInfo

// FieldNames returns the YAML names of a struct type's fields in declaration order.
func FieldNames(t reflect.Type) []string {
	return fieldsOf(t).names
}

func fieldsOf(t reflect.Type) *structInfo {
	if c, ok := structCache.Load(t); ok {
		return c.(*structInfo)
	}
	info := &structInfo{byName: map[string]int{}}
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		tag := f.Tag.Get("yaml")
		name, _, _ := strings.Cut(tag, ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		info.byName[name] = i
		info.names = append(info.names, name)
	}
	structCache.Store(t, info)
	return info
}

// Suggest returns the candidate closest to name (case-insensitive equality first, then edit distance within
// a third of the name's length, at least 2), or "".
func Suggest(name string, candidates []string) string {
	best, bestDist := "", -1
	lname := strings.ToLower(name)
	limit := max(2, len(name)/3)
	for _, c := range candidates {
		if strings.ToLower(c) == lname {
			return c
		}
		dist := distance(lname, strings.ToLower(c))
		if dist <= limit && (bestDist < 0 || dist < bestDist) {
			best, bestDist = c, dist
		}
	}
	return best
}

// distance is the Levenshtein edit distance between two strings (bytes).
func distance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return 1 << 30
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
