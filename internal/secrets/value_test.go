package secrets_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.yaml.in/yaml/v3"

	"github.com/proxops/proxops/internal/secrets"
)

const plain = "pve-token-6e1f0c2a-9d8b-4f7e"

type holder struct {
	Name   string
	Token  secrets.Value
	hidden secrets.Value
	Ptr    *secrets.Value
	List   []secrets.Value
	Map    map[string]secrets.Value
}

func newHolder() holder {
	v := secrets.New(plain)
	return holder{Name: "lab", Token: v, hidden: v, Ptr: &v, List: []secrets.Value{v}, Map: map[string]secrets.Value{"k": v}}
}

func TestValuePrintsRedactedWithEveryVerb(t *testing.T) {
	v := secrets.New(plain)
	h := newHolder()
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%X", "%d", "%10s", "%-12v", "%.3s", "%t", "%p", "%e"} {
		for name, arg := range map[string]any{"value": v, "pointer": &v, "struct": h, "struct pointer": &h,
			"slice": []secrets.Value{v}, "map": map[string]secrets.Value{"t": v}, "map key": map[secrets.Value]int{v: 1}} {
			out := fmt.Sprintf(verb, arg)
			if strings.Contains(out, plain) || strings.Contains(out, fmt.Sprintf("%x", plain)) {
				t.Errorf("Sprintf(%q, %s) = %q: shows the value", verb, name, out)
			}
		}
	}
	if got := fmt.Sprintf("%v|%s|%#v|%q", v, v, v, v); got != `<redacted>|<redacted>|<redacted>|"<redacted>"` {
		t.Errorf("got %q", got)
	}
	if got := fmt.Sprint(v) + fmt.Sprintln(v); got != "<redacted><redacted>\n" {
		t.Errorf("Sprint/Sprintln = %q", got)
	}
	if !strings.Contains(fmt.Sprintf("%+v", h), "Token:<redacted>") {
		t.Errorf("%%+v of a struct does not show the redaction: %+v", h)
	}
}

func TestValueInErrorsIsRedacted(t *testing.T) {
	v := secrets.New(plain)
	wrapVerb := "login: %w" // not a constant, so vet allows the wrong operand this test is about
	errs := []error{
		fmt.Errorf("login with %v failed", v),
		fmt.Errorf("login with %s failed", v),
		fmt.Errorf("login with %q failed", v),
		fmt.Errorf(wrapVerb, v), // a Value is not an error; fmt prints the bad operand with %v
		fmt.Errorf("wrapped: %w", fmt.Errorf("inner %v", newHolder())),
		errors.New("token " + v.String()),
		errors.Join(fmt.Errorf("a %v", v), fmt.Errorf("b %#v", &v)),
	}
	for i, err := range errs {
		if strings.Contains(err.Error(), plain) {
			t.Errorf("error shows the value: %v", err)
		}
		if i != 3 && !strings.Contains(err.Error(), secrets.Redacted) {
			t.Errorf("error lacks the redaction: %v", err)
		}
	}
}

func TestValueMarshalsRedacted(t *testing.T) {
	h := newHolder()
	j, err := json.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	// encoding/json escapes < and > as \u003c and \u003e; decoded, the text is the redaction.
	var back map[string]any
	if err := json.Unmarshal(j, &back); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"Name": "lab", "Token": secrets.Redacted, "Ptr": secrets.Redacted,
		"List": []any{secrets.Redacted}, "Map": map[string]any{"k": secrets.Redacted}}
	if d := cmp.Diff(want, back); d != "" || strings.Contains(string(j), plain) {
		t.Errorf("json = %s (-want +got):\n%s", j, d)
	}
	y, err := yaml.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(y), plain) || !strings.Contains(string(y), "token: <redacted>") {
		t.Errorf("yaml = %s", y)
	}
	text, err := secrets.New(plain).MarshalText()
	if err != nil || string(text) != secrets.Redacted {
		t.Errorf("MarshalText = %q, %v", text, err)
	}
	// A Value as a JSON map key goes through MarshalText.
	k, err := json.Marshal(map[secrets.Value]int{secrets.New(plain): 1})
	if err != nil || string(k) != `{"\u003credacted\u003e":1}` {
		t.Errorf("json map key = %s, %v", k, err)
	}
}

func TestValueLogsRedactedThroughSlog(t *testing.T) {
	v := secrets.New(plain)
	for name, newHandler := range map[string]func(*bytes.Buffer) slog.Handler{
		"json": func(b *bytes.Buffer) slog.Handler { return slog.NewJSONHandler(b, nil) },
		"text": func(b *bytes.Buffer) slog.Handler { return slog.NewTextHandler(b, nil) },
	} {
		var buf bytes.Buffer
		log := slog.New(newHandler(&buf))
		log.Info("pve login", slog.Any("token", v), slog.Any("pointer", &v), slog.Any("holder", newHolder()),
			slog.Group("auth", "secret", v), slog.Any("err", fmt.Errorf("bad %v", v)))
		log.With("bound", v).Warn("again")
		out := buf.String()
		if strings.Contains(out, plain) {
			t.Errorf("%s handler output shows the value:\n%s", name, out)
		}
		if strings.Count(out, secrets.Redacted) < 5 {
			t.Errorf("%s handler output lacks redactions:\n%s", name, out)
		}
	}
	var buf bytes.Buffer
	slog.New(slog.NewJSONHandler(&buf, nil)).Info("m", "token", v)
	if !strings.Contains(buf.String(), `"token":"<redacted>"`) {
		t.Errorf("json handler: %s", buf.String())
	}
}

func TestValueRevealsOnlyOnRequest(t *testing.T) {
	v := secrets.New(plain)
	if v.Reveal() != plain {
		t.Errorf("Reveal = %q", v.Reveal())
	}
	if v.IsEmpty() || !(secrets.Value{}).IsEmpty() || !secrets.New("").IsEmpty() {
		t.Error("IsEmpty is wrong")
	}
	if !v.Equal(secrets.New(plain)) || v.Equal(secrets.New(plain+"x")) || v.Equal(secrets.Value{}) {
		t.Error("Equal is wrong")
	}
}

func TestValueComparesWithCmpWithoutShowingIt(t *testing.T) {
	a, b := newHolder(), newHolder()
	b.Token = secrets.New("other-" + plain)
	diff := cmp.Diff(a, b, cmp.AllowUnexported(holder{}))
	if diff == "" {
		t.Fatal("cmp.Diff saw no difference between two different values")
	}
	if strings.Contains(diff, plain) {
		t.Errorf("cmp.Diff shows the value:\n%s", diff)
	}
	if d := cmp.Diff(newHolder(), newHolder(), cmp.AllowUnexported(holder{})); d != "" {
		t.Errorf("equal holders differ:\n%s", d)
	}
}

func TestValueDecodesFromYAMLConfiguration(t *testing.T) {
	var cfg struct {
		Token secrets.Value `yaml:"token"`
		Empty secrets.Value `yaml:"empty"`
	}
	if err := yaml.Unmarshal([]byte("token: "+plain+"\nempty: ~\n"), &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.Token.Reveal() != plain || !cfg.Empty.IsEmpty() {
		t.Errorf("decoded %q / %q", cfg.Token.Reveal(), cfg.Empty.Reveal())
	}
	err := yaml.Unmarshal([]byte("token:\n  nested: "+plain+"\n"), &cfg)
	if err == nil || strings.Contains(err.Error(), plain) || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("mapping for a Value: err = %v", err)
	}
}
