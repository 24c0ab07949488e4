package pvesim

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/proxops/proxops/internal/testcorpus"
)

func newDescs(t *testing.T) *Sim {
	t.Helper()
	s, err := New(DefaultSpec())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// currentLines are the key lines of a config file's current section (before the first [section]), by key.
func currentLines(raw string) map[string]string {
	out := map[string]string{}
	for _, l := range strings.Split(raw, "\n") {
		if strings.HasPrefix(l, "[") {
			break
		}
		if k, v, ok := strings.Cut(l, ": "); ok && !strings.HasPrefix(l, "#") {
			out[k] = strings.TrimSpace(v)
		}
	}
	return out
}

// Every corpus file is parsed and printed again as PVE's writer prints it. The container files of
// pve-container's snapshot tests were written by PVE and come back byte for byte (descriptions too: Perl's
// split drops the trailing empty field, so no "#" line is added). The hand-written files come back in PVE's
// normal form: keys sorted, the comment lines as the encoded description first, drives printed by
// print_drive; their keys and values are those of the original (drives as the same set of settings), and
// the normal form is a fixed point.
func TestEveryCorpusFileReprintsAsPVEWritesIt(t *testing.T) {
	s := newDescs(t)
	identical := 0
	for _, corpus := range testcorpus.Guests {
		kind, typ := corpus.Name, corpus.Type
		files, err := filepath.Glob(filepath.Join(testcorpus.Dir(kind), "*.conf"))
		if err != nil || len(files) == 0 {
			t.Fatalf("no corpus in %s: %v", kind, err)
		}
		for _, f := range files {
			name := kind + "/" + filepath.Base(f)
			raw, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			cf, warnings := parseConfigFile(s.desc(typ), 8006, string(raw))
			if len(warnings) > 0 {
				t.Errorf("%s: parser warnings %q", name, warnings)
				continue
			}
			out := renderConfigFile(typ, cf)
			if out == string(raw) {
				identical++
				continue
			}
			if corpus.WrittenByPVE || strings.HasPrefix(filepath.Base(f), "snapshot-input__") {
				t.Errorf("%s was written by PVE and must re-print byte for byte:\n--- original\n%s--- re-printed\n%s", name, raw, out)
				continue
			}
			again, _ := parseConfigFile(s.desc(typ), 8006, out)
			if twice := renderConfigFile(typ, again); twice != out {
				t.Errorf("%s: the normal form is not a fixed point:\n%s---\n%s", name, out, twice)
			}
			orig, got := currentLines(string(raw)), currentLines(out)
			for k, v := range orig {
				if k == "cdrom" {
					k = "ide2"
				}
				w, ok := got[k]
				switch {
				case !ok:
					t.Errorf("%s: key %s lost in the re-print", name, k)
				case w != v && !(isDrive(k) && sameTokens(v, w)):
					t.Errorf("%s: %s: %q re-printed as %q", name, k, v, w)
				}
			}
			if len(got) != len(orig) {
				t.Errorf("%s: %d keys re-printed, the original has %d", name, len(got), len(orig))
			}
			var comments []string
			for _, l := range strings.Split(string(raw), "\n") {
				if strings.HasPrefix(l, "[") {
					break
				}
				if c, ok := strings.CutPrefix(l, "#"); ok {
					comments = append(comments, c)
				}
			}
			if want := strings.TrimRight(strings.Join(comments, "\n"), " \t\n"); cf.current.conf["description"] != want && len(comments) > 0 {
				t.Errorf("%s: description %q, want the comment lines %q", name, cf.current.conf["description"], want)
			}
		}
	}
	// The 42 container files of pve-container's snapshot tests, at least.
	if identical < 42 {
		t.Errorf("%d corpus files re-print byte for byte, want at least 42", identical)
	}
}

// sameTokens reports whether two property strings hold the same settings in any order (a drive the
// writer re-printed).
func sameTokens(a, b string) bool {
	x, y := strings.Split(a, ","), strings.Split(b, ",")
	slices.Sort(x)
	slices.Sort(y)
	return slices.Equal(x, y)
}

// The section rules of parse_vm_config and parse_pct_config, with PVE's warning texts: a second [PENDING]
// or [special:cloudinit] is reported, an unknown [special:...] or other section is skipped with its lines
// (silently), a container knows no special sections (the header is a bad line), and trailing empty comment
// lines of a description are not written back (Perl's split drops trailing empty fields).
func TestConfigFileSectionsFollowPVEsParsers(t *testing.T) {
	s := newDescs(t)
	cases := []struct {
		name, typ, raw string
		warnings       []string
		// reprint is the expected re-print ("" for the input itself).
		reprint string
	}{
		{name: "duplicate pending", typ: "qemu",
			raw:      "memory: 512\n\n[PENDING]\ncores: 2\n\n[PENDING]\ncores: 4\n",
			warnings: []string{"vm 100 - duplicate section: pending"},
			reprint:  "memory: 512\n\n[PENDING]\ncores: 4\n"},
		{name: "duplicate cloudinit", typ: "qemu",
			raw:      "ide2: local-lvm:vm-100-cloudinit,media=cdrom\nmemory: 512\n\n[special:cloudinit]\nciuser: a\n\n[special:cloudinit]\nciuser: b\n",
			warnings: []string{"vm 100 - duplicate special section: cloudinit"},
			reprint:  "ide2: local-lvm:vm-100-cloudinit,media=cdrom\nmemory: 512\n\n[special:cloudinit]\nciuser: b\n"},
		{name: "unknown special section skipped with its lines", typ: "qemu",
			raw:      "memory: 512\n\n[special:foo]\nbogus line\nnot: a key\n\n[special:fleecing]\nfleecing-images: local-lvm:vm-100-fleece-0\n",
			warnings: []string{"vm 100 - skipping unknown section: 'special:foo'"},
			reprint:  "memory: 512\n\n[special:fleecing]\nfleecing-images: local-lvm:vm-100-fleece-0\n"},
		{name: "cloudinit section of a VM without a cloud-init drive", typ: "qemu",
			raw:     "memory: 512\n\n[special:cloudinit]\nciuser: a\n",
			reprint: "memory: 512\n"},
		{name: "container description round trip", typ: "lxc",
			raw: "#first line\n#second%3A line\narch: amd64\nhostname: ct\n"},
		{name: "container special header is a bad line", typ: "lxc",
			raw:      "hostname: ct\n[special:cloudinit]\nmemory: 512\n",
			warnings: []string{"vm 100 - unable to parse config: [special:cloudinit]"},
			reprint:  "hostname: ct\nmemory: 512\n"},
		{name: "container description with trailing empty comment lines", typ: "lxc",
			raw:     "#note\n#\n#\nhostname: ct\n",
			reprint: "#note\nhostname: ct\n"},
	}
	for _, c := range cases {
		cf, w := parseConfigFile(s.desc(c.typ), 100, c.raw)
		if !slices.Equal(w, c.warnings) {
			t.Errorf("%s: warnings %q, want %q", c.name, w, c.warnings)
		}
		want := c.reprint
		if want == "" {
			want = c.raw
		}
		if got := renderConfigFile(c.typ, cf); got != want {
			t.Errorf("%s: re-printed\n%s--- want\n%s", c.name, got, want)
		}
	}
}
