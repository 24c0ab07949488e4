package secrets_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/proxops/proxops/internal/secrets"
)

// fixture returns the bytes of testdata/<name>.
func fixture(t testing.TB, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", filepath.FromSlash(name)))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// keysFrom parses the throwaway identities of testdata/age/<name>.agekey.
func keysFrom(t testing.TB, name string) *secrets.AgeKeys {
	t.Helper()
	path := "testdata/age/" + name + ".agekey"
	k, err := secrets.ParseAgeKeys(path, fixture(t, "age/"+name+".agekey"))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// noKeys is a key source without identities.
var noKeys = &secrets.AgeKeys{}

// plaintexts returns every value of the fixtures' plaintext sources long enough to be recognised in a message
// (short values such as "proxops" also occur in ordinary words), plus the base64 blob of each SSH key.
func plaintexts(t testing.TB) []string {
	t.Helper()
	files, err := filepath.Glob("testdata/plain/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, "testdata/demo/secrets.plain.yaml")
	var out []string
	var walk func(n *yaml.Node, isValue bool)
	walk = func(n *yaml.Node, isValue bool) {
		switch n.Kind {
		case yaml.DocumentNode, yaml.SequenceNode:
			for _, c := range n.Content {
				walk(c, true)
			}
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				walk(n.Content[i+1], true)
			}
		case yaml.ScalarNode:
			if isValue && len(n.Value) >= 12 {
				out = append(out, n.Value)
				if f := strings.Fields(n.Value); len(f) >= 2 && strings.HasPrefix(f[1], "AAAA") {
					out = append(out, f[1])
				}
			}
		default:
			// Aliases repeat a value already walked.
		}
	}
	for _, f := range files {
		var doc yaml.Node
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.Unmarshal(data, &doc); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		walk(&doc, false)
	}
	if len(out) < 10 {
		t.Fatalf("found only %d plaintext values; the fixtures changed shape", len(out))
	}
	return out
}

// assertNoPlaintext fails when s contains any fixture plaintext or age private key.
func assertNoPlaintext(t testing.TB, what, s string) {
	t.Helper()
	for _, p := range plaintexts(t) {
		if strings.Contains(s, p) {
			t.Errorf("%s leaks a plaintext value %q:\n%s", what, p, s)
		}
	}
	if strings.Contains(s, "AGE-SECRET-KEY") {
		t.Errorf("%s leaks an age private key:\n%s", what, s)
	}
}

// lineOf returns the 1-based line of testdata/<name> that starts (after indentation) with prefix.
func lineOf(t testing.TB, name, prefix string) int {
	t.Helper()
	for i, l := range strings.Split(string(fixture(t, name)), "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), prefix) {
			return i + 1
		}
	}
	t.Fatalf("%s has no line starting with %q", name, prefix)
	return 0
}
