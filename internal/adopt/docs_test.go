package adopt_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/proxops/proxops/internal/adopt"
	"github.com/proxops/proxops/internal/inventory"
	"github.com/proxops/proxops/internal/pvesim/schema"
	"github.com/proxops/proxops/internal/pvewire"
)

const (
	gapsDoc      = "../../docs/gaps.md"
	beginMarker  = "<!-- BEGIN GENERATED: the model's key lists; go test ./internal/adopt -run GapsDoc -update rewrites this part -->"
	endMarker    = "<!-- END GENERATED -->"
	indexedLabel = "N"
)

// generatedGaps renders the part of docs/gaps.md that comes from the model: per guest type, the keys the
// manifests cover, PVE's bookkeeping, and every other key of PVE's schema with why it is not modelled; then
// the notes of unmodelled settings inside modelled keys.
func generatedGaps() string {
	var b strings.Builder
	keys := func(plain, prefixes []string) string {
		var all []string
		for _, k := range plain {
			all = append(all, "`"+k+"`")
		}
		for _, p := range prefixes {
			all = append(all, "`"+p+indexedLabel+"`")
		}
		return strings.Join(all, ", ")
	}
	for _, t := range []struct {
		typ   inventory.GuestType
		title string
	}{{inventory.QEMU, "VMs and TemplateVMs (qemu)"}, {inventory.LXC, "LXCs and TemplateCTs (lxc)"}} {
		b.WriteString("### " + t.title + "\n\n")
		b.WriteString("Modelled: " + keys(pvewire.ModelledKeys(t.typ), pvewire.ModelledPrefixes(t.typ)) + ".\n\n")
		b.WriteString("PVE's bookkeeping (never compared, never a gap): " +
			keys(pvewire.BookkeepingKeys(t.typ), pvewire.BookkeepingPrefixes()) + ".\n\n")
		b.WriteString("| key | why it is a gap |\n| --- | --- |\n")
		for _, g := range adopt.KnownGaps() {
			if g.Type != t.typ {
				continue
			}
			k := g.Key
			if g.Indexed {
				k += indexedLabel
			}
			b.WriteString("| `" + k + "` | " + g.Note + " |\n")
		}
		b.WriteString("\n")
	}
	b.WriteString("### Settings inside modelled keys\n\n| setting | why it is a gap |\n| --- | --- |\n")
	for _, n := range adopt.TokenNotes() {
		b.WriteString("| `" + n.Token + "` | " + n.Note + "; ProxOps keeps it as PVE has it |\n")
	}
	return b.String()
}

// docs/gaps.md shows exactly the model's lists: it cannot drift from the code.
func TestGapsDocMatchesTheModel(t *testing.T) {
	raw, err := os.ReadFile(gapsDoc)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	begin, end := strings.Index(doc, beginMarker), strings.Index(doc, endMarker)
	if begin < 0 || end < begin {
		t.Fatalf("%s lacks the generated section markers", gapsDoc)
	}
	want := doc[:begin+len(beginMarker)] + "\n\n" + generatedGaps() + "\n" + doc[end:]
	if want == doc {
		return
	}
	if *update {
		if err := os.WriteFile(filepath.Clean(gapsDoc), []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("%s is out of date with the model: run go test ./internal/adopt -run GapsDoc -update", gapsDoc)
}

// Every configuration key of PVE's API schema is modelled, PVE's bookkeeping, or a gap with its reason in the
// table: a key PVE adds shows up here before an operator meets it with a generic note.
func TestEveryPVEConfigKeyIsModelledBookkeepingOrAKnownGap(t *testing.T) {
	s, err := schema.Load()
	if err != nil {
		t.Fatal(err)
	}
	requestOnly := []string{"delete", "digest", "force", "node", "revert", "skiplock", "vmid", "background_delay", "cdrom"}
	for _, typ := range []inventory.GuestType{inventory.QEMU, inventory.LXC} {
		m := s.Method("/nodes/{node}/"+string(typ)+"/{vmid}/config", "PUT")
		for name := range m.Parameters.Properties {
			key, indexed := strings.CutSuffix(name, "[n]")
			if slices.Contains(requestOnly, key) {
				continue
			}
			probe := key
			if indexed {
				probe += "1"
			}
			known := slices.ContainsFunc(adopt.KnownGaps(), func(g adopt.KnownGap) bool {
				return g.Type == typ && g.Key == key && g.Indexed == indexed
			})
			if !known && !pvewire.IsModelled(typ, probe) && !pvewire.IsBookkeeping(typ, probe) {
				t.Errorf("%s key %s is neither modelled, bookkeeping nor in the table of known gaps", typ, name)
			}
		}
	}
}
