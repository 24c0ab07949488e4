package yamldecode

import (
	"bytes"
	"slices"
	"strings"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// parsePlain builds the node tree of a one-document file written in the plain YAML that manifests use:
// block mappings with plain keys, block sequences, single-line plain and quoted scalars (quoted without
// escapes), flow collections that close on their line, and comments, indented with spaces, with LF or CRLF
// line ends. It returns the nodes yaml.v3 builds for the same text (positions, kinds, styles and tags;
// comments are not kept, nothing reads them), and ok false as soon as the text uses anything else, so that
// the caller parses it with yaml.v3, which also reports every syntax error. A nil root with ok true is an
// empty document.
//
// It exists for speed: yaml.v3 spends most of a repository's load in its scanner, and this subset is
// nearly every manifest.
func parsePlain(data []byte) (root *yaml.Node, ok bool) {
	p := plainParser{}
	if !p.split(data) {
		return nil, false
	}
	if len(p.lines) == 0 {
		return nil, true
	}
	first := p.lines[0]
	if first.indent != 0 {
		return nil, false
	}
	root, ok = p.block(first)
	if !ok || p.next < len(p.lines) {
		return nil, false
	}
	if p.wide {
		p.characterColumns(root)
	}
	return root, true
}

// plainRunes reports whether text is UTF-8 whose characters beyond ASCII are all ones yaml.v3 reads as
// printable, and none it reads as a line break or byte order mark.
func plainRunes(text []byte) bool {
	for len(text) > 0 {
		r, size := utf8.DecodeRune(text)
		text = text[size:]
		switch {
		case r < 0x80:
		case r == utf8.RuneError, r < 0xa0, r > 0xfffd, r == 0x2028, r == 0x2029, r == 0xfeff, r >= 0xd800 && r < 0xe000:
			return false
		}
	}
	return true
}

// characterColumns turns the tree's byte columns into the character columns yaml.v3 reports.
func (p *plainParser) characterColumns(n *yaml.Node) {
	line := p.lineText(n.Line)
	if n.Column-1 <= len(line) {
		n.Column = utf8.RuneCount(line[:n.Column-1]) + 1
	}
	for _, c := range n.Content {
		p.characterColumns(c)
	}
}

// lineText returns a line's text.
func (p *plainParser) lineText(num int) []byte {
	i, _ := slices.BinarySearchFunc(p.lines, num, func(l plainLine, num int) int { return l.num - num })
	if i >= len(p.lines) || p.lines[i].num != num {
		return nil
	}
	return p.lines[i].full
}

// plainLine is a line with content: its 1-based number, its indentation and the text after it (a trailing
// comment included).
type plainLine struct {
	num    int
	indent int
	text   []byte
	full   []byte // the whole line
}

// plainView is the rest of a line from a 0-based column on.
type plainView struct {
	num  int
	col  int
	text []byte
}

type plainParser struct {
	lines []plainLine
	slab  []yaml.Node // where nodes are allocated, a chunk at a time
	next  int         // the first line not consumed
	wide  bool        // the text has characters of more than one byte
}

// split keeps the lines with content, refusing what the subset does not cover: tabs, a carriage return
// other than that of a CRLF line end, other control characters, characters yaml.v3 does not read as
// printable, and document markers or directives.
func (p *plainParser) split(data []byte) bool {
	for i, b := range data {
		switch {
		case b == '\r' && i+1 < len(data) && data[i+1] == '\n':
		case b == 0x7f || (b < 0x20 && b != '\n'):
			return false
		}
		p.wide = p.wide || b >= 0x80
	}
	if p.wide && !plainRunes(data) {
		return false
	}
	p.lines = make([]plainLine, 0, bytes.Count(data, []byte{'\n'})+1)
	num := 0
	for len(data) > 0 {
		num++
		var line []byte
		if nl := bytes.IndexByte(data, '\n'); nl >= 0 {
			line, data = data[:nl], data[nl+1:]
		} else {
			line, data = data, nil
		}
		line = bytes.TrimSuffix(line, []byte{'\r'})
		indent := 0
		for indent < len(line) && line[indent] == ' ' {
			indent++
		}
		text := line[indent:]
		if len(bytes.TrimRight(text, " ")) == 0 || text[0] == '#' {
			continue
		}
		if indent == 0 && (bytes.HasPrefix(text, []byte("---")) || bytes.HasPrefix(text, []byte("...")) || text[0] == '%') {
			return false
		}
		p.lines = append(p.lines, plainLine{num: num, indent: indent, text: text, full: line})
	}
	return true
}

// newNode returns a pointer to a copy of n, allocated with the document's other nodes.
func (p *plainParser) newNode(n yaml.Node) *yaml.Node {
	if len(p.slab) == cap(p.slab) {
		p.slab = make([]yaml.Node, 0, 32)
	}
	p.slab = append(p.slab, n)
	return &p.slab[len(p.slab)-1]
}

func (l plainLine) view() plainView { return plainView{num: l.num, col: l.indent, text: l.text} }

// isEntry reports whether a view starts a sequence entry ("- " or a lone "-").
func (v plainView) isEntry() bool {
	return len(v.text) > 0 && v.text[0] == '-' && (len(v.text) == 1 || v.text[1] == ' ')
}

// skip drops n bytes and the spaces after them.
func (v plainView) skip(n int) plainView {
	v.text, v.col = v.text[n:], v.col+n
	for len(v.text) > 0 && v.text[0] == ' ' {
		v.text, v.col = v.text[1:], v.col+1
	}
	return v
}

// blank reports whether nothing but spaces and a comment is left.
func (v plainView) blank() bool { return len(v.text) == 0 || v.text[0] == '#' }

// block parses the mapping or sequence whose first line is l (its indentation is the block's).
func (p *plainParser) block(l plainLine) (*yaml.Node, bool) {
	if l.view().isEntry() {
		return p.sequence(l.indent)
	}
	p.next++
	return p.mapping(l.view())
}

// mapping parses a block mapping whose first key starts at first (already consumed); its other keys are
// on the following lines at the same column.
func (p *plainParser) mapping(first plainView) (*yaml.Node, bool) {
	indent := first.col
	m := p.newNode(yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Line: first.num, Column: first.col + 1})
	v := first
	for {
		key, colon, rest, ok := p.plainKey(v)
		if !ok {
			return nil, false
		}
		val, ok := p.value(rest, colon, indent)
		if !ok {
			return nil, false
		}
		m.Content = append(m.Content, key, val)
		if p.next >= len(p.lines) {
			return m, true
		}
		l := p.lines[p.next]
		switch {
		case l.indent < indent:
			return m, true
		case l.indent > indent || l.view().isEntry():
			return nil, false
		}
		p.next++
		v = l.view()
	}
}

// sequence parses a block sequence whose entries start at column indent, from the next line on.
func (p *plainParser) sequence(indent int) (*yaml.Node, bool) {
	first := p.lines[p.next]
	s := p.newNode(yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq", Line: first.num, Column: indent + 1})
	for p.next < len(p.lines) {
		l := p.lines[p.next]
		if l.indent < indent || (l.indent == indent && !l.view().isEntry()) {
			break
		}
		if l.indent > indent {
			return nil, false
		}
		p.next++
		item := l.view().skip(1)
		if item.blank() || item.isEntry() {
			// An empty entry, or a nested sequence on the entry's line.
			return nil, false
		}
		var n *yaml.Node
		var ok bool
		if _, _, _, isKey := p.plainKey(item); isKey {
			n, ok = p.mapping(item)
		} else {
			n, ok = p.inline(item)
			if ok && p.next < len(p.lines) && p.lines[p.next].indent > indent {
				return nil, false
			}
		}
		if !ok {
			return nil, false
		}
		s.Content = append(s.Content, n)
	}
	return s, true
}

// value parses what follows a key's colon (at the 0-based column colon): a value on the same line, a block
// on the lines below, or nothing (null). indent is the mapping's column; a sequence at that column is the
// key's value (an indentless sequence).
func (p *plainParser) value(rest plainView, colon, indent int) (*yaml.Node, bool) {
	if !rest.blank() {
		return p.inline(rest)
	}
	if p.next < len(p.lines) {
		l := p.lines[p.next]
		if l.indent > indent || (l.indent == indent && l.view().isEntry()) {
			return p.block(l)
		}
	}
	// yaml.v3 places an empty value just after the colon.
	return p.newNode(yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null", Line: rest.num, Column: colon + 2}), true
}

// inline parses a value that starts on its line: a quoted or plain scalar, or a flow sequence, followed
// only by spaces and a comment.
func (p *plainParser) inline(v plainView) (*yaml.Node, bool) {
	var n *yaml.Node
	var rest plainView
	var ok bool
	switch v.text[0] {
	case '[', '{':
		n, rest, ok = p.flowCollection(v, 1)
	case '"', '\'':
		n, rest, ok = p.quoted(v)
	default:
		n, rest, ok = p.plainScalar(v, false)
	}
	if !ok || !rest.blank() {
		return nil, false
	}
	return n, true
}

// plainKey reads a plain key and its colon at the start of v: the key's node, the colon's 0-based column
// and what follows it. ok is false when v does not start with a plain key the subset covers.
func (p *plainParser) plainKey(v plainView) (key *yaml.Node, colon int, rest plainView, ok bool) {
	if !plainStart(v.text, false) {
		return nil, 0, v, false
	}
	for i := 1; i < len(v.text) && i <= maxPlainKey; i++ {
		switch v.text[i] {
		case ':':
			if i+1 < len(v.text) && v.text[i+1] != ' ' {
				continue
			}
			if v.text[i-1] == ' ' {
				return nil, 0, v, false
			}
			value, tag := sharePlain(v.text[:i])
			return p.newNode(yaml.Node{Kind: yaml.ScalarNode, Tag: tag, Value: value, Line: v.num, Column: v.col + 1}),
				v.col + i, v.skip(i + 1), true
		case '#':
			if v.text[i-1] == ' ' {
				return nil, 0, v, false
			}
		}
	}
	return nil, 0, v, false
}

// maxPlainKey bounds a key's length well under the 1,024 characters yaml.v3 allows a simple key.
const maxPlainKey = 512

// plainStart reports whether text starts a plain scalar the subset covers: not an indicator, and a dash
// only when a character that is not a space (nor, in a flow, a flow indicator) follows it.
func plainStart(text []byte, flow bool) bool {
	if len(text) == 0 {
		return false
	}
	switch text[0] {
	case '-':
		return len(text) > 1 && text[1] != ' ' && !(flow && isFlowIndicator(text[1]))
	case '?', ':', ',', '[', ']', '{', '}', '#', '&', '*', '!', '|', '>', '\'', '"', '%', '@', '`', ' ':
		return false
	}
	return true
}

// flowPlainByte reports whether a plain scalar in a flow may hold c in the subset: letters, digits,
// spaces, characters beyond ASCII and a few punctuation marks with no meaning to YAML there.
func flowPlainByte(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c >= 0x80:
		return true
	}
	return strings.IndexByte(" -_./+=~", c) >= 0
}

func isFlowIndicator(b byte) bool { return b == ',' || b == '[' || b == ']' || b == '{' || b == '}' }

// plainScalar reads a plain scalar at the start of v, up to a comment or the end of the line (in a flow,
// up to a comma or the closing bracket). A colon that would start a mapping refuses the text, and so does,
// in a flow, any character that would need yaml.v3's finer rules.
func (p *plainParser) plainScalar(v plainView, flow bool) (*yaml.Node, plainView, bool) {
	if !plainStart(v.text, flow) {
		return nil, v, false
	}
	end := len(v.text)
scan:
	for i := 0; i < len(v.text); i++ {
		switch c := v.text[i]; {
		case c == '#' && i > 0 && v.text[i-1] == ' ':
			end = i
			break scan
		case flow && (c == ',' || c == ']' || c == '}'):
			end = i
			break scan
		case flow && !flowPlainByte(c):
			return nil, v, false
		case c == ':' && (i+1 == len(v.text) || v.text[i+1] == ' '):
			return nil, v, false
		}
	}
	value, tag := sharePlain(bytes.TrimRight(v.text[:end], " "))
	n := p.newNode(yaml.Node{Kind: yaml.ScalarNode, Tag: tag, Value: value, Line: v.num, Column: v.col + 1})
	return n, v.skip(end), true
}

// plainTag is the tag yaml.v3 resolves a plain scalar to.
func plainTag(value string) string {
	if value == "<<" {
		return "!!merge"
	}
	return (&yaml.Node{Kind: yaml.ScalarNode, Value: value}).ShortTag()
}

// quoted reads a single- or double-quoted scalar that ends on its line; a double-quoted one with an escape
// is refused.
func (p *plainParser) quoted(v plainView) (*yaml.Node, plainView, bool) {
	q := v.text[0]
	var value []byte
	i := 1
	for ; ; i++ {
		if i >= len(v.text) {
			return nil, v, false
		}
		c := v.text[i]
		if c == '\\' && q == '"' {
			return nil, v, false
		}
		if c != q {
			value = append(value, c)
			continue
		}
		if q == '\'' && i+1 < len(v.text) && v.text[i+1] == '\'' {
			value = append(value, '\'')
			i++
			continue
		}
		break
	}
	style := yaml.DoubleQuotedStyle
	if q == '\'' {
		style = yaml.SingleQuotedStyle
	}
	n := p.newNode(yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Style: style, Value: string(value), Line: v.num, Column: v.col + 1})
	return n, v.skip(i + 1), true
}

// maxFlowDepth bounds how deeply flows nest in the subset.
const maxFlowDepth = 16

// flowNode reads a node in a flow: a nested flow collection, or a quoted or plain scalar.
func (p *plainParser) flowNode(v plainView, depth int) (*yaml.Node, plainView, bool) {
	switch {
	case len(v.text) == 0:
		return nil, v, false
	case v.text[0] == '[' || v.text[0] == '{':
		return p.flowCollection(v, depth+1)
	case v.text[0] == '"' || v.text[0] == '\'':
		return p.quoted(v)
	}
	return p.plainScalar(v, true)
}

// flowCollection reads a flow sequence or mapping, nested flows included, that closes on its line.
func (p *plainParser) flowCollection(v plainView, depth int) (*yaml.Node, plainView, bool) {
	if depth > maxFlowDepth {
		return nil, v, false
	}
	if v.text[0] == '{' {
		return p.flowMapping(v, depth)
	}
	return p.flowSequence(v, depth)
}

// flowMapping reads a flow mapping of plain keys that closes on its line.
func (p *plainParser) flowMapping(v plainView, depth int) (*yaml.Node, plainView, bool) {
	m := p.newNode(yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Style: yaml.FlowStyle, Line: v.num, Column: v.col + 1})
	rest, ok := p.flowEntries(v, '}', func(cur plainView) (plainView, bool) {
		key, rest, ok := p.flowKey(cur)
		if !ok {
			return cur, false
		}
		val, rest, ok := p.flowNode(rest, depth)
		m.Content = append(m.Content, key, val)
		return rest, ok
	})
	return m, rest, ok
}

// flowKey reads a plain key of a flow mapping and the colon and space after it.
func (p *plainParser) flowKey(v plainView) (*yaml.Node, plainView, bool) {
	if !plainStart(v.text, true) {
		return nil, v, false
	}
	for i := 1; i+1 < len(v.text) && i <= maxPlainKey; i++ {
		switch c := v.text[i]; {
		case c == ':' && v.text[i+1] == ' ' && v.text[i-1] != ' ':
			value, tag := sharePlain(v.text[:i])
			return p.newNode(yaml.Node{Kind: yaml.ScalarNode, Tag: tag, Value: value, Line: v.num, Column: v.col + 1}), v.skip(i + 1), true
		case !flowPlainByte(c):
			return nil, v, false
		}
	}
	return nil, v, false
}

// flowSequence reads a flow sequence that closes on its line.
func (p *plainParser) flowSequence(v plainView, depth int) (*yaml.Node, plainView, bool) {
	s := p.newNode(yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq", Style: yaml.FlowStyle, Line: v.num, Column: v.col + 1})
	rest, ok := p.flowEntries(v, ']', func(cur plainView) (plainView, bool) {
		n, rest, ok := p.flowNode(cur, depth)
		s.Content = append(s.Content, n)
		return rest, ok
	})
	return s, rest, ok
}

// flowEntries reads the comma-separated entries of the flow collection opening at v, each with entry, up to
// close: an empty collection, or entries with no empty one and no trailing comma. It returns what follows
// close.
func (p *plainParser) flowEntries(v plainView, close byte, entry func(plainView) (plainView, bool)) (plainView, bool) {
	cur := v.skip(1)
	if len(cur.text) > 0 && cur.text[0] == close {
		return cur.skip(1), true
	}
	for {
		var ok bool
		if cur, ok = entry(cur); !ok || len(cur.text) == 0 {
			return v, false
		}
		switch cur.text[0] {
		case close:
			return cur.skip(1), true
		case ',':
			cur = cur.skip(1)
			if len(cur.text) == 0 || cur.text[0] == close || cur.text[0] == ',' {
				return v, false
			}
		default:
			return v, false
		}
	}
}
