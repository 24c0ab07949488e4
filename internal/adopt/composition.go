package adopt

import (
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/proxops/proxops/internal/repo"
)

// MissingEntries returns the entries of want (../../<path> composition entries) that a cluster's
// resources.yaml does not list yet, in want's order. compositionFile is the file's repository path
// (clusters/<cluster>/resources.yaml); data is its content (nil when it does not exist).
func MissingEntries(compositionFile string, data []byte, want []string) ([]string, error) {
	entries, diags := repo.ParseComposition(compositionFile, data)
	if diags.HasErrors() {
		return nil, fmt.Errorf("%s: %w", compositionFile, diags.Errors())
	}
	dir := path.Dir(compositionFile)
	have := map[string]bool{}
	for _, e := range entries {
		have[path.Clean(path.Join(dir, e.Path))] = true
	}
	var out []string
	for _, w := range want {
		if !have[path.Clean(path.Join(dir, w))] {
			out = append(out, w)
		}
	}
	return out, nil
}

// AppendComposition appends entries to a resources.yaml, keeping everything already in it (comments, order,
// layout): after the last entry of its list, in the list's own indentation. A file with no list gets one;
// an empty file becomes "resources:" with the entries. The result is read back and must list the old
// entries followed by the new ones.
func AppendComposition(compositionFile string, data []byte, entries []string) ([]byte, error) {
	if len(entries) == 0 {
		return data, nil
	}
	before, diags := repo.ParseComposition(compositionFile, data)
	if diags.HasErrors() {
		return nil, fmt.Errorf("%s: %w", compositionFile, diags.Errors())
	}
	out, err := appendEntries(data, entries)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", compositionFile, err)
	}
	after, diags := repo.ParseComposition(compositionFile, out)
	var got, want []string
	for _, e := range after {
		got = append(got, e.Path)
	}
	for _, e := range before {
		want = append(want, e.Path)
	}
	want = append(want, entries...)
	if diags.HasErrors() || !slices.Equal(got, want) {
		return nil, fmt.Errorf("%s: appending the entries would change the file's meaning; add them by hand", compositionFile)
	}
	return out, nil
}

func appendEntries(data []byte, entries []string) ([]byte, error) {
	text := string(data)
	block := func(prefix string) []string {
		out := make([]string, len(entries))
		for i, e := range entries {
			out[i] = prefix + e
		}
		return out
	}
	var doc yaml.Node
	if strings.TrimSpace(text) != "" {
		if err := yaml.Unmarshal(data, &doc); err != nil {
			return nil, err
		}
	}
	if len(doc.Content) == 0 {
		return []byte(withNewline(text) + "resources:\n" + strings.Join(block("  - "), "\n") + "\n"), nil
	}
	root := doc.Content[0]
	lines := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
	var seq, key *yaml.Node
	switch root.Kind {
	case yaml.SequenceNode:
		seq = root
	case yaml.MappingNode:
		for i := 0; i+1 < len(root.Content); i += 2 {
			if root.Content[i].Value == "resources" {
				key, seq = root.Content[i], root.Content[i+1]
			}
		}
		if key == nil {
			return []byte(withNewline(text) + "resources:\n" + strings.Join(block("  - "), "\n") + "\n"), nil
		}
	default:
		return nil, errors.New("not a composition (want resources: and a list)")
	}
	if seq.Kind == yaml.SequenceNode && seq.Style&yaml.FlowStyle == 0 && len(seq.Content) > 0 {
		first, last := seq.Content[0], seq.Content[len(seq.Content)-1]
		if first.Line < 1 || first.Line > len(lines) || first.Column < 1 || first.Column-1 > len(lines[first.Line-1]) {
			return nil, errors.New("cannot locate the list")
		}
		prefix := lines[first.Line-1][:first.Column-1]
		if strings.Trim(prefix, " -") != "" {
			return nil, errors.New("the list's layout is not one entry per line")
		}
		return insertAfter(lines, last.Line, block(prefix)), nil
	}
	// An empty list ("resources:", "resources: []", "resources: ~"): the key's line becomes "resources:".
	empty := seq.Kind == yaml.ScalarNode && seq.Tag == "!!null" || seq.Kind == yaml.SequenceNode && len(seq.Content) == 0
	if key == nil || !empty || key.Line < 1 || key.Line > len(lines) {
		return nil, errors.New("the list is not in block form; add the entries by hand")
	}
	if seq.Line > key.Line {
		return nil, errors.New("the empty list spans lines; add the entries by hand")
	}
	indent := strings.Repeat(" ", key.Column-1)
	line := lines[key.Line-1]
	comment := ""
	if i := strings.Index(line, " #"); i >= 0 {
		comment = line[i:]
	}
	lines[key.Line-1] = indent + "resources:" + comment
	return insertAfter(lines, key.Line, block(indent+"  - ")), nil
}

func insertAfter(lines []string, line int, add []string) []byte {
	out := append(slices.Clone(lines[:line]), add...)
	out = append(out, lines[line:]...)
	return []byte(strings.Join(out, "\n") + "\n")
}

func withNewline(s string) string {
	if s != "" && !strings.HasSuffix(s, "\n") {
		return s + "\n"
	}
	return s
}
