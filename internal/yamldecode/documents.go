package yamldecode

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/proxops/proxops/internal/diag"
)

// Document is one YAML document of a file.
type Document struct {
	// Index is the 1-based position of the document in its file, counting empty documents.
	Index int
	// Root is the document's top-level node (never an alias or a document node).
	Root *yaml.Node
}

var lineRE = regexp.MustCompile(`^yaml: line (\d+): `)

// MaxDocuments is the most YAML documents one file may hold (empty documents count). A file with more is
// refused at the first document beyond it, before it is parsed, so what a file costs in memory stays bounded
// by the cap rather than by the file's size.
const MaxDocuments = 20000

// Documents splits a file into its non-empty YAML documents. A syntax error ends the file: the documents
// before it are returned with one error diagnostic that carries the line of the problem (line 1 when the
// parser does not say). A file of more than MaxDocuments documents gets an error at the first one beyond.
func Documents(file string, data []byte) (docs []Document, diags diag.List) {
	diags = EachDocument(file, data, func(d Document) { docs = append(docs, d) })
	return docs, diags
}

// EachDocument calls fn with each non-empty YAML document of a file in turn, as Documents returns them,
// parsing the next one only after fn returns: a caller that keeps what it decoded rather than the nodes
// holds one document's nodes at a time.
func EachDocument(file string, data []byte, fn func(Document)) (diags diag.List) {
	defer func() {
		if r := recover(); r != nil {
			diags = append(diags, diag.Diagnostic{Severity: diag.Error, File: file, Line: 1, Column: 1,
				Message: "invalid YAML: " + complaint(fmt.Sprint(r))})
		}
	}()
	if !bytes.Contains(data, []byte("\n---")) && !bytes.Contains(data, []byte("\n...")) {
		// One document (the common case). Most manifests are in the plain subset parsePlain covers, much
		// faster than yaml.v3; the rest are parsed from the byte slice, which avoids the reader's buffers.
		if root, ok := parsePlain(data); ok {
			if root != nil {
				fn(Document{Index: 1, Root: root})
			}
			return diags
		}
		var n yaml.Node
		if err := yaml.Unmarshal(data, &n); err != nil {
			return append(diags, syntaxError(file, data, err))
		}
		if root := Resolve(&n); !IsNull(root) {
			fn(Document{Index: 1, Root: root})
		}
		return diags
	}
	if starts := documentStarts(data, MaxDocuments+1); len(starts) > MaxDocuments {
		// Refused before anything is parsed past the cap: the line is where the document beyond it starts.
		line := starts[MaxDocuments]
		diags = append(diags, diag.Diagnostic{Severity: diag.Error, File: file, Line: line, Column: 1,
			Message: fmt.Sprintf("more than %d YAML documents in one file: split it into several files", MaxDocuments)})
		return diags
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for index := 1; ; index++ {
		var n yaml.Node
		err := dec.Decode(&n)
		if errors.Is(err, io.EOF) {
			return diags
		}
		if err != nil {
			return append(diags, syntaxError(file, data, err))
		}
		root := Resolve(&n)
		if IsNull(root) {
			continue
		}
		fn(Document{Index: index, Root: root})
	}
}

// documentStarts returns the 1-based lines where a file's documents start, up to limit of them: line 1,
// and the line after each "---" separator line that follows content. It overcounts nothing a parser
// would count less than (a separator inside a block scalar is rare and only makes the count larger), so
// it is a bound for the cap, not a parser.
func documentStarts(data []byte, limit int) []int {
	starts := []int{1}
	line := 1
	for len(data) > 0 && len(starts) < limit {
		nl := bytes.IndexByte(data, '\n')
		cur := data
		if nl >= 0 {
			cur, data = data[:nl], data[nl+1:]
		} else {
			data = nil
		}
		if line > 1 && bytes.HasPrefix(cur, []byte("---")) && (len(cur) == 3 || cur[3] == ' ' || cur[3] == '\t' || cur[3] == '\r') {
			starts = append(starts, line)
		}
		line++
	}
	return starts
}

// syntaxError turns a YAML parser error into a diagnostic at the line it names (line 1 when it names
// none). The parser does not report a column, so the column is that of the line's first non-blank
// character.
func syntaxError(file string, data []byte, err error) diag.Diagnostic {
	msg := err.Error()
	d := diag.Diagnostic{Severity: diag.Error, File: file, Line: 1}
	if m := lineRE.FindStringSubmatch(msg); m != nil {
		d.Line, _ = strconv.Atoi(m[1])
		msg = strings.TrimPrefix(msg, m[0])
	} else {
		msg = strings.TrimPrefix(msg, "yaml: ")
	}
	d.Column = firstColumn(data, d.Line)
	d.Message = "invalid YAML: " + complaint(msg)
	return d
}

// quotedInComplaint is a piece of the file the parser quotes in its complaint (an anchor's name).
var quotedInComplaint = regexp.MustCompile(`'[^']*'`)

// complaint is the parser's complaint with every piece of the file it quotes that is long or not
// printable cut to an excerpt, and the rest escaped: the parser's own words are shown, never more than a
// short excerpt of the file.
func complaint(msg string) string {
	var b strings.Builder
	last := 0
	for _, m := range quotedInComplaint.FindAllStringIndex(msg, -1) {
		b.WriteString(printable(msg[last:m[0]]))
		piece := msg[m[0]+1 : m[1]-1]
		if e := diag.Excerpt(piece); e != `"`+piece+`"` {
			b.WriteString(e)
		} else {
			b.WriteString(msg[m[0]:m[1]])
		}
		last = m[1]
	}
	b.WriteString(printable(msg[last:]))
	return b.String()
}

// printable escapes what a terminal would interpret.
func printable(s string) string {
	q := strconv.Quote(s)
	return strings.ReplaceAll(q[1:len(q)-1], `\"`, `"`)
}

// firstColumn returns the 1-based column of the first non-blank character of a 1-based line, 1 when the
// line is blank or does not exist.
func firstColumn(data []byte, line int) int {
	for i := 1; i < line; i++ {
		nl := bytes.IndexByte(data, '\n')
		if nl < 0 {
			return 1
		}
		data = data[nl+1:]
	}
	if nl := bytes.IndexByte(data, '\n'); nl >= 0 {
		data = data[:nl]
	}
	col := 1
	for _, r := range string(data) {
		if r != ' ' && r != '\t' && r != '\r' {
			return col
		}
		col++
	}
	return 1
}
