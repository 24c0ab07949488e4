package manifest_test

import (
	"testing"

	"github.com/proxops/proxops/internal/manifest"
)

func TestKindsAreCaseInsensitiveWithAliases(t *testing.T) {
	for in, want := range map[string]manifest.Kind{
		"VM": manifest.KindVM, "vm": manifest.KindVM, "Lxc": manifest.KindLXC, "templatevm": manifest.KindTemplateVM,
		"TVM": manifest.KindTemplateVM, "template": manifest.KindTemplateVM, "TCT": manifest.KindTemplateCT,
		"templateCT": manifest.KindTemplateCT, "iso": manifest.KindISO, "CTT": manifest.KindCTTemplate,
		"cttemplate": manifest.KindCTTemplate, "DISK": manifest.KindDiskImage, "diskimage": manifest.KindDiskImage,
	} {
		if got, ok := manifest.ParseKind(in); !ok || got != want {
			t.Errorf("ParseKind(%q) = %q, %v; want %q", in, got, ok, want)
		}
	}
	for _, bad := range []string{"", "VirtualMachine", "container", "tpl"} {
		if k, ok := manifest.ParseKind(bad); ok {
			t.Errorf("ParseKind(%q) = %q, want unknown", bad, k)
		}
	}
}

func TestEveryKindHasARootAndBack(t *testing.T) {
	for _, k := range manifest.Kinds {
		back, ok := manifest.KindOfRoot(k.Root())
		if !ok || back != k {
			t.Errorf("KindOfRoot(%q) = %q, want %q", k.Root(), back, k)
		}
	}
	if len(manifest.KindRoots) != len(manifest.Kinds) {
		t.Errorf("KindRoots has %d entries, want %d", len(manifest.KindRoots), len(manifest.Kinds))
	}
}

func TestParseDependsOnNormalisesKindsAndReportsBadTokens(t *testing.T) {
	refs, bad := manifest.ParseDependsOn(" ctt:golden-base , VM:app,, iso:talos-1.8,ISO talos, Widget:x")
	want := []manifest.Ref{{Kind: manifest.KindCTTemplate, Name: "golden-base"}, {Kind: manifest.KindVM, Name: "app"}, {Kind: manifest.KindISO, Name: "talos-1.8"}}
	if len(refs) != len(want) {
		t.Fatalf("refs = %v, want %v", refs, want)
	}
	for i := range want {
		if refs[i] != want[i] {
			t.Errorf("refs[%d] = %v, want %v", i, refs[i], want[i])
		}
	}
	if len(bad) != 2 || bad[0] != "ISO talos" || bad[1] != "Widget:x" {
		t.Errorf("bad = %q, want [ISO talos Widget:x]", bad)
	}
}
