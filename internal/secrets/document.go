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
	malformed := func(line, col int, entry, msg string) *Error {
		return &Error{Class: ClassMalformed, File: file, Line: line, Column: col, Entry: entry, Message: msg}
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var root yaml.Node
	if err := dec.Decode(&root); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, malformed(0, 0, "", "the file is empty; want a YAML mapping with secrets: and/or cloud-init:")
		}
		return nil, malformed(yamlErrorLine(err), 0, "", "not valid YAML")
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return nil, malformed(extra.Line, extra.Column, "", "the file holds more than one YAML document; want one")
	} else if !errors.Is(err, io.EOF) {
		return nil, malformed(yamlErrorLine(err), 0, "", "not valid YAML")
	}
	top := &root
	if top.Kind == yaml.DocumentNode && len(top.Content) == 1 {
		top = top.Content[0]
	}
	if top.Kind != yaml.MappingNode {
		return nil, malformed(top.Line, top.Column, "", fmt.Sprintf(
			"the document is a %s; want a mapping with secrets: and/or cloud-init:", kindName(top.Kind)))
	}

	doc := &document{entries: map[string]leaf{}}
	var problems []*Error
	report := func(line, col int, entry, format string, args ...any) {
		problems = append(problems, malformed(line, col, entry, fmt.Sprintf(format, args...)))
	}

	// entriesOf reads a flat name → scalar mapping.
	entriesOf := func(section string, n *yaml.Node, cloudInit bool) {
		where := section + ":"
		if cloudInit {
			where = keyCloudInit + "." + section + ":"
		}
		if isNull(n) {
			return
		}
		if n.Kind != yaml.MappingNode {
			report(n.Line, n.Column, "", "%s must be a mapping of name to value, found a %s", where, kindName(n.Kind))
			return
		}
		seen := map[string]bool{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Kind != yaml.ScalarNode || k.Value == "" {
				report(k.Line, k.Column, "", "%s has an entry without a plain, non-empty name", where)
				continue
			}
			name := k.Value
			path := entryPath(section, name)
			if cloudInit {
				if msg := checkName(name); msg != "" {
					report(k.Line, k.Column, "", "%s entry %s: %s", where, quoteInput(name), msg)
					continue
				}
			}
			if seen[name] {
				report(k.Line, k.Column, path, "defined more than once")
				continue
			}
			seen[name] = true
			if v.Kind != yaml.ScalarNode {
				report(k.Line, k.Column, path, "must be a single value (a string or a number), found a %s", kindName(v.Kind))
				continue
			}
			value := v.Value
			if isNull(v) {
				value = ""
			}
			if plaintext && section == string(SSHKeys) && value != "" {
				value = strings.TrimSpace(value)
				if msg := checkSSHKeyLine(value); msg != "" {
					report(k.Line, k.Column, path, "%s", msg)
					continue
				}
			}
			doc.entries[path] = leaf{section: section, name: name, value: value, line: k.Line, column: k.Column}
		}
	}

	seenTop := map[string]bool{}
	for i := 0; i+1 < len(top.Content); i += 2 {
		k, v := top.Content[i], top.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			continue
		}
		if seenTop[k.Value] && (k.Value == keySecrets || k.Value == keyCloudInit || k.Value == keySOPS) {
			report(k.Line, k.Column, "", "top-level key %s: appears more than once", k.Value)
			continue
		}
		seenTop[k.Value] = true
		switch k.Value {
		case keySOPS:
			doc.hasSOPS = true
		case keySecrets:
			doc.hasSecrets = true
			entriesOf(keySecrets, v, false)
		case keyCloudInit:
			doc.hasCloudInit = true
			if isNull(v) {
				continue
			}
			if v.Kind != yaml.MappingNode {
				report(v.Line, v.Column, "", "cloud-init: must be a mapping with ssh-keys: and/or passwords:, found a %s", kindName(v.Kind))
				continue
			}
			seenCI := map[string]bool{}
			for j := 0; j+1 < len(v.Content); j += 2 {
				ck, cv := v.Content[j], v.Content[j+1]
				if ck.Kind != yaml.ScalarNode || (ck.Value != string(SSHKeys) && ck.Value != string(Passwords)) {
					continue // other cloud-init blocks are not ours; references to them cannot be written
				}
				if seenCI[ck.Value] {
					report(ck.Line, ck.Column, "", "cloud-init.%s: appears more than once", ck.Value)
					continue
				}
				seenCI[ck.Value] = true
				entriesOf(ck.Value, cv, true)
			}
		}
	}
	if !doc.hasSecrets && !doc.hasCloudInit {
		report(top.Line, top.Column, "", "the document has neither a secrets: nor a cloud-init: block")
	}
	if len(problems) == 0 {
		return doc, nil
	}
	slices.SortFunc(problems, func(a, b *Error) int {
		return cmp.Or(cmp.Compare(a.Line, b.Line), cmp.Compare(a.Column, b.Column), cmp.Compare(a.Error(), b.Error()))
	})
	errs := make([]error, len(problems))
	for i, p := range problems {
		errs[i] = p
	}
	return doc, errors.Join(errs...)
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
