package yamldecode

import (
	"bytes"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// v3Root parses data with yaml.v3 as EachDocument's one-document path does.
func v3Root(data []byte) (*yaml.Node, error) {
	var n yaml.Node
	if err := yaml.Unmarshal(data, &n); err != nil {
		return nil, err
	}
	root := Resolve(&n)
	if IsNull(root) {
		return nil, nil
	}
	return root, nil
}

// treeDifference describes the first difference between two node trees in what the decoder reads (kind,
// style, tag, value, position, children); comments are not compared. Empty when they agree.
func treeDifference(path string, a, b *yaml.Node) string {
	switch {
	case a == nil && b == nil:
		return ""
	case a == nil || b == nil:
		return fmt.Sprintf("%s: %v against %v", path, a, b)
	}
	if a.Kind != b.Kind || a.Style != b.Style || a.Tag != b.Tag || a.Value != b.Value || a.Line != b.Line ||
		a.Column != b.Column || a.Anchor != b.Anchor || (a.Alias == nil) != (b.Alias == nil) || len(a.Content) != len(b.Content) {
		return fmt.Sprintf("%s: kind %d style %d tag %s value %q at %d:%d (%d children) against kind %d style %d tag %s value %q at %d:%d (%d children)",
			path, a.Kind, a.Style, a.Tag, a.Value, a.Line, a.Column, len(a.Content), b.Kind, b.Style, b.Tag, b.Value, b.Line, b.Column, len(b.Content))
	}
	for i := range a.Content {
		if d := treeDifference(fmt.Sprintf("%s[%d]", path, i), a.Content[i], b.Content[i]); d != "" {
			return d
		}
	}
	return ""
}

// agree checks that whatever parsePlain accepts, yaml.v3 accepts too, with the same tree; it reports
// whether parsePlain accepted.
func agree(t *testing.T, name string, data []byte) bool {
	t.Helper()
	got, ok := parsePlain(data)
	if !ok {
		return false
	}
	want, err := v3Root(data)
	if err != nil {
		t.Fatalf("%s: accepted text yaml.v3 refuses (%v):\n%s", name, err, data)
	}
	if d := treeDifference("root", got, want); d != "" {
		t.Fatalf("%s: the trees differ at %s\n%s", name, d, data)
	}
	return true
}

func TestPlainParserBuildsTheTreeYAMLv3Builds(t *testing.T) {
	for _, text := range []string{
		"apiVersion: proxops.io/v1\nkind: VM\nmetadata:\n  name: web-01\n  labels:\n    tier: web\nspec:\n  vmid: 100\n  cores: 2\n  memory: 2Gi\n",
		"a: 1\nb: -2\nc: 1.5\nd: true\ne: null\nf: ~\ng: yes\nh: 0x1f\ni: 1e3\nj: .inf\nk: 2026-12-07\n",
		"list:\n- a\n- b\nnext: x\n",
		"list:\n  - a: 1\n    b: 2\n  - c: 3\n",
		"- a\n- b: 1\n  c:\n  - x\n  - y\n- 'q'\n",
		"empty:\nnext: 1\nlast:\n",
		"tags: [a, b, \"c d\", 'e''f', 10, true]\nnone: []\nmap: {}\nx: [ a ,b ]\n",
		"# head\na: 1 # trailing\n\n  # indented comment\nb: 'x' # c\nc: \"y\"   \n",
		"url: http://example.test:8006/api2/json\nstorage: local-lvm:32\nhash: a#b\n",
		"<<: x\nk: <<\n",
		"a:\n  b:\n    c:\n      - d\n      - e: f\n        g: h\n",
		"- - a\n",
		"a: b: c\n",
		"a: |\n  text\n",
		"a: &x 1\nb: *x\n",
		"\"quoted\": key\n",
		"a: \"esc\\n\"\n",
		"a:\n\tb: 1\n",
		"a: 1\n  b: 2\n",
		"a: multi\n  line\n",
		"a: [1, [2]]\n",
		"rules:\n  - {type: in, action: ACCEPT, source: +admins, comment: ssh from the admins}\n  - {cidr: 192.0.2.0/24}\n  - {a: 'q', b: \"r\"}\n",
		"a: {b: [c]}\n",
		"metadata: {name: cache-01}\nspec:\n  nodes: [{node: pve9, priority: 5}, {node: pve1, priority: 1}]\n  o: {a: {b: [1, [2, []], {}]}}\n",
		"a: [b: c]\n",
		"a: [[[[[[[[[[[[[[[[[[[[x]]]]]]]]]]]]]]]]]]]\n",
		"a: {b: }\n",
		"a: {b: c,}\n",
		"a: {b:c}\n",
		"a: {b}\n",
		"a: [1,]\n",
		"a : 1\n",
		"-\n",
		"a: 'unterminated\n",
		"a: naïve\nb: [é, 'ü', \"ß\"]  # – ok\n# — comment\nc: {ö: x, y: 日本}\n",
		"a: b\u2028c\n",
		"a: b\u0085c\n",
		"a: \xff\n",
		"a: \U0001F600\n",
		"a: 1\r\nb:\r\n  - c # d\r\n  - [e, 'f']\r\n\r\n# g\r\n",
		"a: 1\rb: 2\n",
		"a: 'x\r\n  y'\r\n",
		"---\na: 1\n",
		"a:\n- b\n  - c\n",
		"key: value\n- item\n",
		"- a\nb: 1\n",
		"",
		"# only a comment\n",
		"x",
	} {
		agree(t, fmt.Sprintf("%q", text), []byte(text))
	}
}

// Every manifest in the repository (examples, goldens, test trees) that the subset covers parses to the
// tree yaml.v3 builds, and the examples, which are how manifests are written, are all covered.
func TestPlainParserAgreesWithYAMLv3OnTheRepositorysManifests(t *testing.T) {
	root := filepath.Join("..", "..")
	accepted, total := 0, 0
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if d.IsDir() || !(strings.HasSuffix(p, ".yaml") || strings.HasSuffix(p, ".yml")) {
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if bytes.Contains(data, []byte("\n---")) {
			return nil // several documents: not this parser's path
		}
		total++
		covered := agree(t, p, data)
		if crlf := bytes.ReplaceAll(data, []byte("\n"), []byte("\r\n")); agree(t, p+" with CRLF", crlf) != covered && !bytes.Contains(data, []byte("\r")) {
			t.Errorf("%s: the plain subset covers it with one kind of line end only", p)
		}
		if covered {
			accepted++
		}
		if !covered && strings.Contains(filepath.ToSlash(p), "examples/demo/") && !strings.HasSuffix(p, ".sops.yaml") {
			t.Errorf("%s: an example manifest is not covered by the plain subset", p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if accepted*2 < total {
		t.Errorf("the plain subset covers %d of %d YAML files of the repository", accepted, total)
	}
	t.Logf("the plain subset covers %d of %d YAML files", accepted, total)
}

// The repository's manifests with a few bytes changed, inserted or removed (the edits a hand makes, and
// the mistakes): whatever the plain parser still accepts, yaml.v3 parses to the same tree.
func TestPlainParserAgreesWithYAMLv3OnEditedManifests(t *testing.T) {
	var docs [][]byte
	for _, dir := range []string{"../../examples", "../../testdata/corpus", "../../internal/plan/testdata"} {
		err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(p, ".yaml") {
				return err
			}
			data, err := os.ReadFile(p)
			if _, ok := parsePlain(data); ok && err == nil {
				docs = append(docs, data)
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if len(docs) < 50 {
		t.Fatalf("only %d manifests to edit", len(docs))
	}
	r := rand.New(rand.NewPCG(5, 9))
	accepted := 0
	alphabet := []rune(" :-#'\"[]{},\n\tx&*!|>?%@`~.0é")
	for i := range 20000 {
		d := bytes.Clone(docs[r.IntN(len(docs))])
		for range 1 + r.IntN(3) {
			j := r.IntN(len(d))
			c := []byte(string(alphabet[r.IntN(len(alphabet))]))
			switch r.IntN(3) {
			case 0:
				d = slices.Concat(d[:j], c, d[j+1:])
			case 1:
				d = slices.Concat(d[:j], c, d[j:])
			default:
				d = slices.Concat(d[:j], d[j+1:])
			}
		}
		if agree(t, fmt.Sprintf("edit %d", i), d) {
			accepted++
		}
	}
	if accepted < 2000 {
		t.Errorf("the plain parser accepted %d of 20000 edited manifests", accepted)
	}
}

func FuzzPlainParserAgreesWithYAMLv3(f *testing.F) {
	for _, s := range []string{
		"a: 1\nb:\n  - x\n  - y: z\n",
		"kind: VM\nmetadata:\n  name: a\nspec:\n  disks:\n  - size: 10G\n    storage: local\n",
		"a: [x, 'y', \"z\"]\nb: {}\nc:\n",
		"- a\n- b: c\n  d: e\n",
		"a: x # c\n# d\nb: 'it''s'\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		agree(t, "fuzz", data)
	})
}

// plainAtoms are the pieces generated documents are made of: ordinary manifest values and the characters
// and forms at the edges of the subset.
var plainAtoms = []string{
	"web-01", "pve1", "2GiB", "local-lvm:32", "192.0.2.10/24", "true", "false", "yes", "no", "on", "null", "~",
	"1", "-2", "+3", "0x1f", "0o17", "1_000", "1e3", ".5", ".inf", "-.inf", ".nan", "2026-12-07", "12:30",
	"<<", "a b", "a  b", "a#b", "a # b", "a: b", "a:", ":a", "-a", "- a", "-", "?a", "? a", "'q'", "'it''s'",
	"\"dq\"", "\"d\\\"q\"", "'un", "\"un", "[]", "{}", "[a, b]", "[a,b]", "[ a , 'b' ]", "[a, [b, c]]",
	"[a,]", "[, a]", "{a: b}", "{a: b, c: [d]}", "{a:b}", "{a}", "{a: }", "[a: b]", "&x a", "*x", "!t a",
	"|", ">", "%a", "@a", "`a", "é", "日本", "a\tb", "a ", " a", "", "#c", "http://x.test:8006/api",
	"a?b", "a!b", "a&b", "a*b", "a|b", "a>b", "a%b", "a@b", "a`b", "a,b", "a]b", "a}b", "a[b", "a{b", "a'b",
	"a\"b", "a:b", "a-", "a -b", "--", "-- a", "---", "...", "[a?]", "[a!b]", "{a: b?}", "['a', \"b\"]",
	"[\"a\": b]", "{'a': b}", "[a b, c d]", "[é]", "{é: ü}", "[~, null, 1]", "[<<]", "{<<: a}",
}

// generatedDocument writes a random document of nested mappings and sequences from plainAtoms, with
// comments, blank lines and irregular indentation thrown in.
func generatedDocument(r *rand.Rand) []byte {
	var b bytes.Buffer
	var block func(indent, depth int)
	atom := func() string { return plainAtoms[r.IntN(len(plainAtoms))] }
	key := func() string {
		if r.IntN(8) == 0 {
			return atom()
		}
		return []string{"name", "spec", "disks", "size", "tags", "cpu", "a", "b-c", "x_y", "k1"}[r.IntN(10)]
	}
	pad := func(n int) string { return strings.Repeat(" ", max(n, 0)) }
	block = func(indent, depth int) {
		seq := r.IntN(3) == 0
		for range 1 + r.IntN(4) {
			if r.IntN(10) == 0 {
				b.WriteString(pad(r.IntN(6)) + "# note\n")
			}
			if r.IntN(12) == 0 {
				b.WriteString("\n")
			}
			in := indent
			if r.IntN(25) == 0 {
				in += r.IntN(3) - 1
			}
			b.WriteString(pad(in))
			if seq {
				b.WriteString("-" + pad(1+r.IntN(2)))
				if r.IntN(3) == 0 {
					b.WriteString(atom() + "\n")
					continue
				}
			}
			b.WriteString(key() + ":")
			switch {
			case depth < 3 && r.IntN(3) == 0:
				if r.IntN(6) == 0 {
					b.WriteString(" # c")
				}
				b.WriteString("\n")
				child := indent + 2
				if seq {
					child = indent + 4
				}
				if r.IntN(5) == 0 {
					child = indent
				}
				block(child, depth+1)
			case r.IntN(8) == 0:
				b.WriteString("\n")
			default:
				b.WriteString(pad(1+r.IntN(2)) + atom())
				if r.IntN(6) == 0 {
					b.WriteString(" # c")
				}
				b.WriteString("\n")
			}
		}
	}
	block(0, 0)
	out := b.Bytes()
	if len(out) > 0 && r.IntN(4) == 0 {
		// One byte changed, inserted or removed.
		i := r.IntN(len(out))
		c := " :-#'\"[]{},\n\tx&*!|>?"[r.IntN(20)]
		switch r.IntN(3) {
		case 0:
			out[i] = c
		case 1:
			out = append(out[:i], append([]byte{c}, out[i:]...)...)
		default:
			out = append(out[:i], out[i+1:]...)
		}
	}
	return out
}

// On generated documents close to the subset's edges, whatever the plain parser accepts yaml.v3 parses to
// the same tree; and it accepts a good share of them, so the comparison is not empty.
func TestPlainParserAgreesWithYAMLv3OnGeneratedDocuments(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	accepted := 0
	const n = 20000
	for i := range n {
		doc := generatedDocument(r)
		if agree(t, fmt.Sprintf("document %d", i), doc) {
			accepted++
		}
		// The same with CRLF line ends, as an editor on Windows writes them.
		agree(t, fmt.Sprintf("document %d with CRLF", i), bytes.ReplaceAll(doc, []byte("\n"), []byte("\r\n")))
	}
	if accepted < n/10 {
		t.Errorf("the plain parser accepted %d of %d generated documents", accepted, n)
	}
	t.Logf("accepted %d of %d", accepted, n)
}
