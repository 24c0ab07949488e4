package repo_test

import (
	"io/fs"
	"os"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/google/go-cmp/cmp"

	"github.com/proxops/proxops/internal/manifest"
	"github.com/proxops/proxops/internal/repo"
	"github.com/proxops/proxops/internal/testcorpus"
)

func TestUpstreamExamplesComposeTheDocumentedTwelveManifests(t *testing.T) {
	r := repo.Load(os.DirFS(testcorpus.Dir("upstream-examples")))
	if diags := r.AllDiagnostics(); len(diags) != 0 {
		t.Fatalf("the example repository has diagnostics:\n%s", diags.Error())
	}
	if diff := cmp.Diff([]string{"example"}, r.ClusterNames()); diff != "" {
		t.Fatalf("clusters (-want +got):\n%s", diff)
	}
	c := r.Cluster("example")
	if !r.Valid("example") {
		t.Fatal("cluster example is not valid")
	}
	var refs []string
	var vmids []int
	for _, res := range c.Resources {
		refs = append(refs, res.Ref().String())
		if id := res.VMID(); id != 0 {
			vmids = append(vmids, id)
		}
	}
	wantRefs := []string{
		"CTTemplate/golden-base", "DiskImage/debian-13-cloud", "ISO/talos-1-8-0", "LXC/cache-01",
		"TemplateCT/debian-tpl", "TemplateVM/almalinux-tpl", "VM/app-vm", "VM/clone-vm", "VM/cloudinit-vm",
		"VM/gpu-passthrough-01", "VM/sops-cloudinit-01", "VM/talos-worker-01",
	}
	if diff := cmp.Diff(wantRefs, refs); diff != "" {
		t.Errorf("composed resources (-want +got):\n%s", diff)
	}
	slices.Sort(vmids)
	if diff := cmp.Diff([]int{142, 400, 410, 412, 413, 900, 901, 910, 9000}, vmids); diff != "" {
		t.Errorf("vmids (-want +got):\n%s", diff)
	}
	cfg := c.Config
	if cfg.BaseURL != "https://pve.example.invalid:8006" || !slices.Equal(cfg.Nodes, []string{"pve01", "pve02"}) ||
		cfg.SecretsPath() != "clusters/example/secrets.sops.yaml" || cfg.Secrets.PVE.Token != "proxops-token" {
		t.Errorf("cluster config = %+v", cfg)
	}
	if r.Config.Reconcile.PruneBudget != 3 || r.Config.Listen != "127.0.0.1:9494" || r.Config.Git.Branch != "main" {
		t.Errorf("process config = %+v", r.Config)
	}
	order := c.Graph.Order()
	pos := map[string]int{}
	for i, ref := range order {
		pos[ref.String()] = i
	}
	for _, e := range [][2]string{
		{"VM/app-vm", "ISO/talos-1-8-0"}, {"VM/app-vm", "CTTemplate/golden-base"}, {"VM/clone-vm", "TemplateVM/almalinux-tpl"},
		{"VM/cloudinit-vm", "DiskImage/debian-13-cloud"}, {"LXC/cache-01", "CTTemplate/golden-base"},
		{"TemplateCT/debian-tpl", "CTTemplate/golden-base"}, {"VM/sops-cloudinit-01", "DiskImage/debian-13-cloud"},
	} {
		if pos[e[0]] <= pos[e[1]] {
			t.Errorf("%s is ordered before its prerequisite %s: %v", e[0], e[1], order)
		}
	}
}

func TestUpstreamTopLevelLegacyFilesAreIgnored(t *testing.T) {
	root := testcorpus.Dir("upstream-examples")
	for _, f := range []string{"app-vm.depends-on.yaml", "base-iso.yaml", "cache-ct.yaml", "cache-vm.yaml", "golden-base.ctt.yaml"} {
		if _, err := os.Stat(root + "/" + f); err != nil {
			t.Fatalf("corpus file %s: %v", f, err)
		}
	}
	r := repo.Load(os.DirFS(root))
	for _, d := range r.AllDiagnostics() {
		if !strings.Contains(d.File, "/") {
			t.Errorf("top-level file reported: %s", d)
		}
	}
}

// copyCorpus copies the example repository into an in-memory file system.
func copyCorpus(t *testing.T) fstest.MapFS {
	t.Helper()
	fsys := fstest.MapFS{}
	root := os.DirFS(testcorpus.Dir("upstream-examples"))
	err := fs.WalkDir(root, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := fs.ReadFile(root, p)
		fsys[p] = &fstest.MapFile{Data: data}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return fsys
}

func TestLegacyFileUnderAKindRootFailsEveryCluster(t *testing.T) {
	fsys := copyCorpus(t)
	fsys["vm/cache-vm.yaml"] = fsys["cache-vm.yaml"]
	fsys["clusters/second/config.yaml"] = &fstest.MapFile{Data: []byte("pve:\n  clusters:\n    second:\n      base-url: https://pve2.example.invalid:8006\n")}
	fsys["clusters/second/resources.yaml"] = &fstest.MapFile{Data: []byte("resources: []\n")}
	r := repo.Load(fsys)
	want := "vm/cache-vm.yaml: legacy layout: sits directly under the vm/ kind root, which is no longer read; move it to vm/base/ or vm/<cluster>/ and list it in clusters/<cluster>/resources.yaml"
	for _, name := range []string{"example", "second"} {
		diags := r.ClusterDiagnostics(name)
		if r.Valid(name) || len(diags) != 1 || diags[0].String() != want {
			t.Errorf("cluster %s: valid=%v diagnostics:\n%s\nwant exactly:\n%s", name, r.Valid(name), diags.Error(), want)
		}
	}
}

func TestOneBrokenClusterDoesNotFailTheOthers(t *testing.T) {
	fsys := copyCorpus(t)
	fsys["clusters/broken/config.yaml"] = &fstest.MapFile{Data: []byte("pve:\n  clusters:\n    broken:\n      base-url: https://pve3.example.invalid:8006\n")}
	fsys["clusters/broken/resources.yaml"] = &fstest.MapFile{Data: []byte("- ../../vm/broken/missing.yaml\n")}
	r := repo.Load(fsys)
	if !r.Valid("example") {
		t.Errorf("cluster example failed because of another cluster:\n%s", r.ClusterDiagnostics("example").Error())
	}
	if r.Valid("broken") {
		t.Error("cluster broken is valid")
	}
	want := "clusters/broken/resources.yaml:1:3: references missing resource vm/broken/missing.yaml"
	if got := r.ClusterDiagnostics("broken").Error(); got != want {
		t.Errorf("diagnostics = %q, want %q", got, want)
	}
}

func TestSharedBaseFileIsParsedOnceAndReportedOnce(t *testing.T) {
	fsys := copyCorpus(t)
	fsys["iso/base/base-iso.yaml"].Data = append(fsys["iso/base/base-iso.yaml"].Data, []byte("  sorce: legacy\n")...)
	fsys["clusters/second/config.yaml"] = &fstest.MapFile{Data: []byte("pve:\n  clusters:\n    second:\n      base-url: https://pve2.example.invalid:8006\n      nodes: [pve01]\n")}
	fsys["clusters/second/resources.yaml"] = &fstest.MapFile{Data: []byte("- ../../iso/base/base-iso.yaml\n")}
	r := repo.Load(fsys)
	all := r.AllDiagnostics()
	if len(all) != 2 {
		t.Fatalf("AllDiagnostics() =\n%s", all.Error())
	}
	want := []string{
		`iso/base/base-iso.yaml:19:7: ISO/talos-1-8-0: spec.nodes[1]: references node "pve02" which is not in pve.clusters.second.nodes (allowed: [pve01])`,
		`iso/base/base-iso.yaml:28:3: warning: ISO/talos-1-8-0: spec.sorce: unknown field`,
	}
	for i, w := range want {
		if all[i].String() != w {
			t.Errorf("diagnostic %d = %s, want %s", i, all[i], w)
		}
	}
	if !r.Valid("example") || r.Valid("second") {
		t.Errorf("valid: example=%v second=%v, want true, false", r.Valid("example"), r.Valid("second"))
	}
	if r.Cluster("second").Resources[0] != r.Cluster("example").Resources[slices.IndexFunc(r.Cluster("example").Resources,
		func(res *manifest.Resource) bool { return res.Kind == manifest.KindISO })] {
		t.Error("a file listed by two clusters was parsed twice")
	}
}
