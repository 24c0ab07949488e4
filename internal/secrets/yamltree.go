package secrets

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/getsops/sops/v3"
	"github.com/getsops/sops/v3/stores"
	"go.yaml.in/yaml/v3"
)

// An encrypted YAML file is read into sops' tree here rather than through sops' YAML store: that store
// imports sops' configuration package, which links its publishing code (cloud storage and gRPC clients) into
// every binary that decrypts, about 15 MB of resident memory in each service for code never run. The tree
// built here is the one sops' store builds from the same YAML (the tests compare the two on many
// documents), because the data key, every value's authentication and the MAC are computed over it: the
// same keys in the same order, scalars typed as the YAML library types them, and comments as sops.Comment
// entries where sops puts them (its encrypted_comment_regex and unencrypted_comment_regex rules read them).

// loadEncryptedTree reads an encrypted YAML document into sops' tree and its metadata.
func loadEncryptedTree(data []byte) (sops.Tree, error) {
	branches, err := yamlTreeBranches(data)
	if err != nil {
		return sops.Tree{}, err
	}
	branches, metadata, err := stores.ExtractMetadata(branches, stores.MetadataOpts{Flatten: stores.MetadataFlattenNone})
	if err != nil {
		return sops.Tree{}, err
	}
	return sops.Tree{Branches: branches, Metadata: metadata}, nil
}

// yamlTreeBranches reads every document of a YAML stream into one tree branch each.
func yamlTreeBranches(data []byte) (sops.TreeBranches, error) {
	if len(data) > 0 {
		// Decoding into a map is what makes the YAML library refuse a key given twice.
		if err := yaml.NewDecoder(bytes.NewReader(data)).Decode(map[string]any{}); err != nil {
			return nil, err
		}
	}
	var out sops.TreeBranches
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var doc yaml.Node
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("read the YAML: %w", err)
		}
		b := treeBuilder{branch: sops.TreeBranch{}}
		if err := b.mapping(&doc, false); err != nil {
			return nil, err
		}
		out = append(out, b.branch)
	}
}

// commentLines are the lines of a YAML comment text without their '#', blank lines left out.
func commentLines(text string, inline bool) []sops.Comment {
	var out []sops.Comment
	for line := range strings.SplitSeq(text, "\n") {
		if line != "" {
			out = append(out, sops.Comment{Value: line[1:], Inline: inline})
		}
	}
	return out
}

// treeBuilder collects one mapping's entries.
type treeBuilder struct{ branch sops.TreeBranch }

func (b *treeBuilder) comment(text string, inline bool) {
	for _, c := range commentLines(text, inline) {
		b.branch = append(b.branch, sops.TreeItem{Key: c})
	}
}

// mapping adds a document's or a mapping's entries. own says the node's own comments were taken by its
// parent.
func (b *treeBuilder) mapping(n *yaml.Node, own bool) error {
	if !own {
		b.comment(n.HeadComment, false)
		b.comment(n.LineComment, false)
	}
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			if err := b.mapping(c, false); err != nil {
				return err
			}
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			if err := b.entry(n.Content[i], n.Content[i+1]); err != nil {
				return err
			}
		}
	case yaml.AliasNode:
		if err := b.mapping(n.Alias, false); err != nil {
			return err
		}
	case yaml.SequenceNode:
		return errors.New("a YAML document that is a sequence cannot hold sops data")
	case yaml.ScalarNode:
		if n.ShortTag() != "!!null" { // an empty document is an empty mapping
			return errors.New("a YAML document that is a single value cannot hold sops data")
		}
	}
	if !own {
		b.comment(n.FootComment, false)
	}
	return nil
}

// entry adds one key and its value, with the comments around them.
func (b *treeBuilder) entry(k, v *yaml.Node) error {
	b.comment(k.HeadComment, false)
	b.comment(k.LineComment, false)
	leaf := v.Kind == yaml.ScalarNode || v.Kind == yaml.AliasNode
	if leaf {
		b.comment(v.HeadComment, false)
		b.comment(v.LineComment, true)
	}
	var key any
	_ = k.Decode(&key)
	value, err := treeValue(v, leaf)
	if err != nil {
		return err
	}
	b.branch = append(b.branch, sops.TreeItem{Key: key, Value: value})
	if leaf {
		b.comment(v.FootComment, false)
	}
	b.comment(k.FootComment, false)
	return nil
}

// treeValue is a value's tree form: a branch for a mapping, a list for a sequence (comments as list items),
// the decoded scalar otherwise. own says the node's own comments were taken by its parent.
func treeValue(n *yaml.Node, own bool) (any, error) {
	switch n.Kind {
	case yaml.MappingNode:
		b := treeBuilder{branch: sops.TreeBranch{}}
		if err := b.mapping(n, own); err != nil {
			return nil, err
		}
		return b.branch, nil
	case yaml.SequenceNode:
		var list []any
		addComments := func(text string, inline bool) {
			for _, c := range commentLines(text, inline) {
				list = append(list, c)
			}
		}
		if !own {
			addComments(n.HeadComment, false)
			addComments(n.LineComment, false)
		}
		for _, item := range n.Content {
			addComments(item.HeadComment, false)
			addComments(item.LineComment, true)
			v, err := treeValue(item, true)
			if err != nil {
				return nil, err
			}
			list = append(list, v)
			addComments(item.FootComment, false)
		}
		if !own {
			addComments(n.FootComment, false)
		}
		return list, nil
	case yaml.ScalarNode:
		var v any
		_ = n.Decode(&v)
		return v, nil
	case yaml.AliasNode:
		return treeValue(n.Alias, false)
	default:
		// A document node never appears as a value.
		return nil, nil
	}
}

// plainYAML renders decrypted tree branches as a YAML stream (one document per branch), comments left out.
func plainYAML(branches sops.TreeBranches) ([]byte, error) {
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	for _, br := range branches {
		n, err := branchNode(br)
		if err != nil {
			return nil, err
		}
		if err := enc.Encode(n); err != nil {
			return nil, err
		}
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func branchNode(br sops.TreeBranch) (*yaml.Node, error) {
	m := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
	for _, item := range br {
		if _, isComment := item.Key.(sops.Comment); isComment {
			continue
		}
		k, err := valueNode(item.Key)
		if err != nil {
			return nil, err
		}
		v, err := valueNode(item.Value)
		if err != nil {
			return nil, err
		}
		m.Content = append(m.Content, k, v)
	}
	return m, nil
}

func valueNode(v any) (*yaml.Node, error) {
	switch v := v.(type) {
	case sops.TreeBranch:
		return branchNode(v)
	case []any:
		s := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
		for _, item := range v {
			if _, isComment := item.(sops.Comment); isComment {
				continue
			}
			n, err := valueNode(item)
			if err != nil {
				return nil, err
			}
			s.Content = append(s.Content, n)
		}
		return s, nil
	}
	n := &yaml.Node{}
	if err := n.Encode(v); err != nil {
		return nil, err
	}
	return n, nil
}
