package secrets

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// The top-level keys of a secrets document.
const (
	keySecrets   = "secrets"
	keyCloudInit = "cloud-init"
	keySOPS      = "sops"
	encPrefix    = "ENC["
)

// document is the shape of a secrets file: the encrypted file as committed (values are ENC[...] strings) or
// the plaintext sops decrypts it to. Both parse with parseDocument, so shape errors carry positions in the
// committed file.
type document struct {
	hasSOPS      bool
	hasSecrets   bool
	hasCloudInit bool
	// entries by dotted path (secrets.<name>, cloud-init.ssh-keys.<name>, cloud-init.passwords.<name>).
	entries map[string]leaf
}

// leaf is one entry: its text (for the committed file, the ENC[...] form) and the position of its key.
type leaf struct {
	section string // secrets, ssh-keys or passwords
	name    string
	value   string
	line    int
	column  int
}

// path returns the entry's dotted path.
func entryPath(section, name string) string {
	if section == keySecrets {
		return secretsPrefix + name
	}
	return refPrefix + section + "." + name
}

var yamlLine = regexp.MustCompile(`line (\d+)`)

// parseDocument parses a secrets document. With plaintext set the values are decrypted text and SSH keys are
// checked to be one OpenSSH public-key line each; otherwise values are taken as they are committed. It
// returns the document whenever the input is a YAML mapping, together with every shape problem found (as
// *Error values of class ClassMalformed joined in position order), so the caller can tell an unencrypted
// file from a malformed one. No message repeats a value.
func parseDocument(file string, data []byte, plaintext bool) (*document, error) {
	p := &docParser{file: file, plaintext: plaintext, doc: &document{entries: map[string]leaf{}}}
	top, err := p.decodeTop(data)
	if err != nil {
		return nil, err
	}
	seenTop := map[string]bool{}
	for i := 0; i+1 < len(top.Content); i += 2 {
		k, v := top.Content[i], top.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			continue
		}
		if seenTop[k.Value] && (k.Value == keySecrets || k.Value == keyCloudInit || k.Value == keySOPS) {
			p.report(k.Line, k.Column, "", "top-level key %s: appears more than once", k.Value)
			continue
		}
		seenTop[k.Value] = true
		switch k.Value {
		case keySOPS:
			p.doc.hasSOPS = true
		case keySecrets:
			p.doc.hasSecrets = true
			p.entries(keySecrets, v, keySecrets+":", nil)
		case keyCloudInit:
			p.doc.hasCloudInit = true
			p.cloudInit(v)
		}
	}
	if !p.doc.hasSecrets && !p.doc.hasCloudInit {
		p.report(top.Line, top.Column, "", "the document has neither a secrets: nor a cloud-init: block")
	}
	return p.doc, p.err()
}

// docParser reads one secrets document, collecting every problem it finds rather than stopping at the first.
type docParser struct {
	file      string
	plaintext bool
	doc       *document
	problems  []*Error
}

func (p *docParser) malformed(line, col int, entry, msg string) *Error {
	return &Error{Class: ClassMalformed, File: p.file, Line: line, Column: col, Entry: entry, Message: msg}
}

func (p *docParser) report(line, col int, entry, format string, args ...any) {
	p.problems = append(p.problems, p.malformed(line, col, entry, fmt.Sprintf(format, args...)))
}

// decodeTop decodes the file's single YAML document and returns its top mapping.
func (p *docParser) decodeTop(data []byte) (*yaml.Node, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var root yaml.Node
	if err := dec.Decode(&root); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, p.malformed(0, 0, "", "the file is empty; want a YAML mapping with secrets: and/or cloud-init:")
		}
		return nil, p.malformed(yamlErrorLine(err), 0, "", "not valid YAML")
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return nil, p.malformed(extra.Line, extra.Column, "", "the file holds more than one YAML document; want one")
	} else if !errors.Is(err, io.EOF) {
		return nil, p.malformed(yamlErrorLine(err), 0, "", "not valid YAML")
	}
	top := &root
	if top.Kind == yaml.DocumentNode && len(top.Content) == 1 {
		top = top.Content[0]
	}
	if top.Kind != yaml.MappingNode {
		return nil, p.malformed(top.Line, top.Column, "", fmt.Sprintf(
			"the document is a %s; want a mapping with secrets: and/or cloud-init:", kindName(top.Kind)))
	}
	return top, nil
}

// cloudInit reads the cloud-init: block: its ssh-keys: and passwords: mappings. Other cloud-init blocks are
// not ours; references to them cannot be written.
func (p *docParser) cloudInit(v *yaml.Node) {
	if isNull(v) {
		return
	}
	if v.Kind != yaml.MappingNode {
		p.report(v.Line, v.Column, "", "cloud-init: must be a mapping with ssh-keys: and/or passwords:, found a %s", kindName(v.Kind))
		return
	}
	seen := map[string]bool{}
	for j := 0; j+1 < len(v.Content); j += 2 {
		k, section := v.Content[j], v.Content[j+1]
		if k.Kind != yaml.ScalarNode || (k.Value != string(SSHKeys) && k.Value != string(Passwords)) {
			continue
		}
		if seen[k.Value] {
			p.report(k.Line, k.Column, "", "cloud-init.%s: appears more than once", k.Value)
			continue
		}
		seen[k.Value] = true
		p.entries(k.Value, section, keyCloudInit+"."+k.Value+":", checkName)
	}
}

// entries reads a flat name → scalar mapping of one section; where names the section in messages, and
// checkNames (when set) says what is wrong with a name, or "".
func (p *docParser) entries(section string, n *yaml.Node, where string, checkNames func(string) string) {
	if isNull(n) {
		return
	}
	if n.Kind != yaml.MappingNode {
		p.report(n.Line, n.Column, "", "%s must be a mapping of name to value, found a %s", where, kindName(n.Kind))
		return
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode || k.Value == "" {
			p.report(k.Line, k.Column, "", "%s has an entry without a plain, non-empty name", where)
			continue
		}
		name := k.Value
		path := entryPath(section, name)
		if checkNames != nil {
			if msg := checkNames(name); msg != "" {
				p.report(k.Line, k.Column, "", "%s entry %s: %s", where, quoteInput(name), msg)
				continue
			}
		}
		if seen[name] {
			p.report(k.Line, k.Column, path, "defined more than once")
			continue
		}
		seen[name] = true
		if v.Kind != yaml.ScalarNode {
			p.report(k.Line, k.Column, path, "must be a single value (a string or a number), found a %s", kindName(v.Kind))
			continue
		}
		value := v.Value
		if isNull(v) {
			value = ""
		}
		if p.plaintext && section == string(SSHKeys) && value != "" {
			value = strings.TrimSpace(value)
			if msg := checkSSHKeyLine(value); msg != "" {
				p.report(k.Line, k.Column, path, "%s", msg)
				continue
			}
		}
		p.doc.entries[path] = leaf{section: section, name: name, value: value, line: k.Line, column: k.Column}
	}
}

// err joins the problems found, ordered by line, column and text; nil when there were none.
func (p *docParser) err() error {
	if len(p.problems) == 0 {
		return nil
	}
	slices.SortFunc(p.problems, func(a, b *Error) int {
		return cmp.Or(cmp.Compare(a.Line, b.Line), cmp.Compare(a.Column, b.Column), cmp.Compare(a.Error(), b.Error()))
	})
	errs := make([]error, len(p.problems))
	for i, e := range p.problems {
		errs[i] = e
	}
	return errors.Join(errs...)
}

// isNull reports whether n is an explicit or implicit YAML null.
func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.Tag == "!!null"
}

// kindName names a YAML node kind for messages.
func kindName(k yaml.Kind) string {
	switch k {
	case yaml.MappingNode:
		return "mapping"
	case yaml.SequenceNode:
		return "list"
	case yaml.ScalarNode:
		return "single value"
	case yaml.AliasNode:
		return "YAML alias (aliases are not supported here)"
	case yaml.DocumentNode:
		return "document"
	default:
		return "empty node"
	}
}

// yamlErrorLine extracts the line number from a YAML syntax error; the rest of the message is not repeated,
// since a scanner message could quote the input.
func yamlErrorLine(err error) int {
	m := yamlLine.FindStringSubmatch(err.Error())
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(m[1])
	return n
}
