package diag_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/proxops/proxops/internal/diag"
)

func TestExcerptQuotesShortValuesWhole(t *testing.T) {
	for v, want := range map[string]string{
		"":                     `""`,
		"pve.lab.invalid:8006": `"pve.lab.invalid:8006"`,
		"größe":                `"größe"`,
		`say "hi"`:             `"say \"hi\""`,
	} {
		if got := diag.Excerpt(v); got != want {
			t.Errorf("Excerpt(%q) = %s, want %s", v, got, want)
		}
	}
}

func TestExcerptCutsLongValuesWithAnEllipsis(t *testing.T) {
	secret := "AGE-SECRET-KEY-1" + strings.Repeat("QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L", 2)
	got := diag.Excerpt(secret)
	want := `"` + secret[:diag.MaxExcerpt] + `"…`
	if got != want {
		t.Fatalf("Excerpt = %s, want %s", got, want)
	}
	if strings.Contains(got, secret[diag.MaxExcerpt:diag.MaxExcerpt+8]) {
		t.Fatalf("Excerpt %s carries text beyond the cut", got)
	}
	exact := strings.Repeat("a", diag.MaxExcerpt)
	if got := diag.Excerpt(exact); got != `"`+exact+`"` {
		t.Fatalf("a value of exactly MaxExcerpt characters was cut: %s", got)
	}
	if got := diag.Excerpt(exact + "b"); got != `"`+exact+`"…` {
		t.Fatalf("a value one character too long: %s", got)
	}
}

func TestExcerptEscapesControlBytesAndInvalidUTF8(t *testing.T) {
	got := diag.Excerpt("a\x00b\x1b[31mc\nd\xffe\u202e")
	want := `"a\x00b\x1b[31mc\nd\xffe\u202e"`
	if got != want {
		t.Fatalf("Excerpt = %s, want %s", got, want)
	}
	for _, r := range got {
		if r < 0x20 || r == 0x7f {
			t.Fatalf("Excerpt %q holds a control character", got)
		}
	}
}

func TestExcerptCountsEscapesAgainstTheLimit(t *testing.T) {
	got := diag.Excerpt(strings.Repeat("\x01", 100))
	body := strings.TrimSuffix(strings.Trim(strings.TrimSuffix(got, "…"), `"`), `"`)
	if n := utf8.RuneCountInString(body); n > diag.MaxExcerpt {
		t.Fatalf("excerpt body is %d characters, more than %d: %s", n, diag.MaxExcerpt, got)
	}
	if !strings.HasSuffix(got, `\x01"…`) {
		t.Fatalf("cut excerpt does not end with whole escapes and an ellipsis: %s", got)
	}
}
