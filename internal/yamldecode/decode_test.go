package yamldecode_test

import (
	"strings"
	"testing"

	"github.com/proxops/proxops/internal/yamldecode"
)

type target struct {
	Name  string            `yaml:"name"`
	Count *int              `yaml:"count"`
	Items []string          `yaml:"items"`
	Extra map[string]string `yaml:"extra"`
}

func decode(t *testing.T, src string) (*target, string) {
	t.Helper()
	docs, diags := yamldecode.Documents("f.yaml", []byte(src))
	var out target
	d := yamldecode.NewDecoder("f.yaml")
	for _, doc := range docs {
		d.Decode(doc.Root, "", &out)
	}
	var lines []string
	for _, x := range append(diags, d.Diags...).Sorted() {
		lines = append(lines, x.String())
	}
	return &out, strings.Join(lines, "\n")
}

func TestSelfIncludingMergeKeyIsAnErrorNotARecursion(t *testing.T) {
	_, got := decode(t, "extra: &a {k: v, <<: *a}\n")
	if !strings.Contains(got, "merge key includes itself") {
		t.Errorf("diagnostics = %q", got)
	}
}

func TestAliasExpansionIsBounded(t *testing.T) {
	var b strings.Builder
	b.WriteString("l0: &l0 [x, x, x, x, x, x, x, x, x, x]\n")
	for i := 1; i < 9; i++ {
		b.WriteString("l" + string(rune('0'+i)) + ": &l" + string(rune('0'+i)) + " [")
		for j := range 10 {
			if j > 0 {
				b.WriteString(", ")
			}
			b.WriteString("*l" + string(rune('0'+i-1)))
		}
		b.WriteString("]\n")
	}
	b.WriteString("items: *l8\n")
	_, got := decode(t, b.String())
	if !strings.Contains(got, "expected a string, got a list") {
		t.Errorf("nested list into []string not reported: %q", got)
	}
}

func TestTypeErrorsAndDuplicatesAreAllReported(t *testing.T) {
	out, got := decode(t, "name: [a]\ncount: x\ncount: 2\nitems: a\nextra: {k: {v: 1}, ok: 3}\nnmae: y\n")
	want := strings.Join([]string{
		`f.yaml:1:7: name: expected a string, got a list`,
		`f.yaml:2:8: count: expected an integer, got "x"`,
		`f.yaml:3:1: count: defined twice (first at line 2)`,
		`f.yaml:4:8: items: expected a list, got "a"`,
		`f.yaml:5:12: extra.k: expected a string, got a mapping`,
		`f.yaml:6:1: warning: nmae: unknown field; did you mean "name"?`,
	}, "\n")
	if got != want {
		t.Errorf("diagnostics:\n%s\nwant:\n%s", got, want)
	}
	if out.Count != nil || out.Extra["ok"] != "3" {
		t.Errorf("decoded = %+v", out)
	}
}

func TestSyntaxErrorsCarryLineAndColumn(t *testing.T) {
	_, got := decode(t, "name: a\n  items: [b\n")
	if !strings.HasPrefix(got, "f.yaml:2:3: invalid YAML: ") {
		t.Errorf("diagnostics = %q", got)
	}
}

func TestSuggestPrefersCaseInsensitiveMatchThenNearest(t *testing.T) {
	known := []string{"storage", "size", "interface", "iothread"}
	for in, want := range map[string]string{"Storage": "storage", "iothred": "iothread", "sise": "size", "completely-else": ""} {
		if got := yamldecode.Suggest(in, known); got != want {
			t.Errorf("Suggest(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestLookupFallsBackToTheNearestAncestor(t *testing.T) {
	p := yamldecode.Positions{"spec": {Line: 3, Column: 1}, "spec.disks[0]": {Line: 5, Column: 7}}
	if got := p.Lookup("spec.disks[0].size"); got != (yamldecode.Pos{Line: 5, Column: 7}) {
		t.Errorf("Lookup = %+v", got)
	}
	if got := p.Lookup("spec.cpu.type"); got != (yamldecode.Pos{Line: 3, Column: 1}) {
		t.Errorf("Lookup = %+v", got)
	}
}

func TestTypeErrorsQuoteOnlyAnExcerptOfTheValue(t *testing.T) {
	long := "tok_" + strings.Repeat("s3cr3t", 20)
	_, got := decode(t, "count: \""+long+"\"\nitems: \"a\\u001b[2Jb\"\n")
	if strings.Contains(got, long[30:]) {
		t.Errorf("diagnostics quote the whole value: %q", got)
	}
	if !strings.Contains(got, `count: expected an integer, got "tok_s3cr3ts3cr3t`) || !strings.Contains(got, `"…`) {
		t.Errorf("diagnostics do not show a cut excerpt: %q", got)
	}
	if !strings.Contains(got, `items: expected a list, got "a\x1b[2Jb"`) || strings.ContainsRune(got, 0x1b) {
		t.Errorf("control bytes are not escaped: %q", got)
	}
}

func TestSyntaxErrorsQuoteOnlyAnExcerptOfTheFile(t *testing.T) {
	anchor := "AGE-SECRET-KEY-1" + strings.Repeat("QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L", 2)
	_, got := decode(t, "name: *"+anchor+"\n")
	if strings.Contains(got, anchor) {
		t.Errorf("syntax error quotes the file beyond an excerpt: %q", got)
	}
	if !strings.Contains(got, "invalid YAML: unknown anchor \"AGE-SECRET-KEY-1") {
		t.Errorf("syntax error lost the parser's complaint: %q", got)
	}
}
