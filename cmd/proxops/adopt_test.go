package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/proxops/proxops/internal/adopt"
	"github.com/proxops/proxops/internal/pvesim"
)

// adoptSpec is a cluster someone built by hand: VMs, a container, a template, an ISO, a container template.
func adoptSpec() pvesim.Spec {
	s := pvesim.DefaultSpec()
	s.Nodes = []pvesim.NodeSpec{{Name: "pve1"}, {Name: "pve2"}}
	s.Bridges = []string{"vmbr0"}
	s.TaskDurations = map[string]pvesim.Duration{"default": pvesim.Duration(5 * time.Millisecond)}
	s.Files = []pvesim.FileSpec{
		{VolID: "local:iso/debian-12.iso", Size: 600 << 20, Node: "pve1"},
		{VolID: "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst", Size: 120 << 20},
	}
	s.Guests = []pvesim.GuestSpec{
		{VMID: 100, Type: "qemu", Node: "pve1", Running: true, Config: "#Web server\nagent: 1\nboot: order=scsi0;ide2\ncores: 2\n" +
			"ide2: local:iso/debian-12.iso,media=cdrom\nmemory: 2048\nname: web\nnet0: virtio=BC:24:11:00:00:01,bridge=vmbr0,firewall=1\n" +
			"ostype: l26\nscsi0: local-lvm:vm-100-disk-0,iothread=1,size=16G\nscsihw: virtio-scsi-single\n" +
			"smbios1: uuid=6f1b2c3d-0000-4000-8000-000000000100\ntags: prod\n"},
		{VMID: 101, Type: "qemu", Node: "pve2", Config: "cores: 1\ncpu: host\nmemory: 1024\nname: build\n" +
			"net0: virtio=BC:24:11:00:00:02,bridge=vmbr0\nscsi0: local-lvm:vm-101-disk-0,size=8G\nballoon: 0\n" +
			"smbios1: uuid=6f1b2c3d-0000-4000-8000-000000000101\n"},
		{VMID: 200, Type: "lxc", Node: "pve1", Config: "arch: amd64\ncores: 1\nhostname: cache\nmemory: 512\n" +
			"net0: name=eth0,bridge=vmbr0,hwaddr=BC:24:11:00:02:00,ip=dhcp,type=veth\nostype: debian\nrootfs: local-lvm:vm-200-disk-0,size=4G\n"},
		{VMID: 900, Type: "qemu", Node: "pve1", Config: "cores: 2\nmemory: 2048\nname: debian-tpl\nnet0: virtio=BC:24:11:00:09:00,bridge=vmbr0\n" +
			"scsi0: local-lvm:base-900-disk-0,size=10G\nsmbios1: uuid=6f1b2c3d-0000-4000-8000-000000000900\ntemplate: 1\n"},
	}
	return s
}

// newAdoptEnv is a git repository holding only the lab cluster's configuration, pointed at the simulator.
func newAdoptEnv(t *testing.T) *demoEnv {
	t.Helper()
	sim, err := pvesim.New(adoptSpec())
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(sim)
	t.Cleanup(func() { srv.Close(); sim.WaitTasks() })
	e := &demoEnv{t: t, sim: sim, srv: srv, repo: filepath.Join(t.TempDir(), "repo"), data: filepath.Join(t.TempDir(), "data")}
	e.write("clusters/lab/config.yaml", "pve:\n  clusters:\n    lab:\n      base-url: "+srv.URL+"\n      nodes: [pve1, pve2]\n")
	e.write("clusters/lab/resources.yaml", "# The lab cluster.\nresources: []\n")
	e.write("clusters/other/config.yaml", "pve:\n  clusters:\n    other:\n      base-url: https://other.example.invalid:8006\n")
	e.write("clusters/other/resources.yaml", "resources: []\n")
	// A file the operator wrote where adoption would put the web VM: never overwritten.
	e.write("vm/lab/web.yaml", "# notes on the web server, not a manifest yet\n")
	e.git("init", "-q")
	e.commit("lab cluster")
	t.Setenv("PROXOPS_PVE_TOKEN_VALUE", pvesim.DefaultRootTokenID+"="+pvesim.DefaultRootTokenSecret)
	t.Setenv("PROXOPS_PVE_USER", "")
	t.Setenv("SOPS_AGE_KEY", "")
	t.Setenv("SOPS_AGE_KEY_FILE", "")
	t.Setenv("HOME", t.TempDir())
	return e
}

func (e *demoEnv) write(rel, content string) {
	e.t.Helper()
	p := filepath.Join(e.repo, filepath.FromSlash(rel))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		e.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		e.t.Fatal(err)
	}
}

func (e *demoEnv) read(rel string) string {
	e.t.Helper()
	data, err := os.ReadFile(filepath.Join(e.repo, filepath.FromSlash(rel)))
	if err != nil {
		e.t.Fatal(err)
	}
	return string(data)
}

// files returns every file under the kind roots with its content.
func (e *demoEnv) files() map[string]string {
	e.t.Helper()
	out := map[string]string{}
	for _, root := range []string{"vm", "lxc", "templatevm", "templatect", "iso", "ctt", "diskimage"} {
		_ = filepath.WalkDir(filepath.Join(e.repo, root), func(p string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return nil
			}
			rel, _ := filepath.Rel(e.repo, p)
			out[filepath.ToSlash(rel)] = e.read(filepath.ToSlash(rel))
			return nil
		})
	}
	return out
}

// proxops adopt on a hand-built cluster: it reads PVE only, writes a manifest per guest and file (never over
// an operator's file), prints the predecessor's report, is byte-identical when run again, appends the
// composition on request, and the committed result diffs to nothing but the claim of the ownership tag.
func TestAdoptThenDiffShowsOnlyTheClaim(t *testing.T) {
	e := newAdoptEnv(t)
	first := e.mustRun(0, "adopt", "--cluster", "lab")
	for _, want := range []string{
		"adopt: cluster lab (read-only)\n",
		"adopt: wrote vm/lab/web-100.yaml (VM)\n",
		"adopt: wrote templatevm/lab/debian-tpl.yaml (TemplateVM)\n",
		"adopt: wrote iso/lab/debian-12-iso.yaml (ISO)\n",
		"adopt: gap VM on pve2#101: balloon=0 — memory ballooning is not modelled\n",
		"adopt: gap LXC on pve1#200: template=unknown — PVE keeps no record of the template a container was made from",
		"adopt: add these lines to clusters/lab/resources.yaml:\n  resources:\n  - ../../ctt/lab/debian-12-standard-12-7-1-amd64-tar-zst.yaml\n",
		"  nodes: [pve1 pve2]\n",
	} {
		if !strings.Contains(first, want) {
			t.Errorf("report lacks %q:\n%s", want, first)
		}
	}
	for _, r := range e.sim.Requests() {
		if r.Method != http.MethodGet {
			t.Errorf("adopt sent %s %s to PVE", r.Method, r.Path)
		}
	}
	if got := e.read("vm/lab/web.yaml"); got != "# notes on the web server, not a manifest yet\n" {
		t.Errorf("the operator's file was changed:\n%s", got)
	}
	files := e.files()
	if !adopt.IsAdopted([]byte(files["vm/lab/web-100.yaml"])) || !strings.Contains(files["vm/lab/web-100.yaml"], "  pve-name: web\n") {
		t.Errorf("vm/lab/web-100.yaml:\n%s", files["vm/lab/web-100.yaml"])
	}

	// Again, unchanged: the same report and the same files.
	if again := e.mustRun(0, "adopt", "--cluster", "lab"); again != first {
		t.Errorf("second run differs:\n%s\n---\n%s", first, again)
	}
	if d := e.files(); !mapsEqual(d, files) {
		t.Error("the second run changed the files")
	}

	// The composition is appended, keeping its comment; the container without a known template is in it.
	out := e.mustRun(0, "adopt", "--cluster", "lab", "--update-resources")
	if !strings.Contains(out, "adopt: added 6 entries to clusters/lab/resources.yaml:") {
		t.Errorf("update not reported:\n%s", out)
	}
	comp := e.read("clusters/lab/resources.yaml")
	if !strings.HasPrefix(comp, "# The lab cluster.\nresources:\n  - ../../ctt/lab/") || !strings.Contains(comp, "../../lxc/lab/cache.yaml") {
		t.Errorf("resources.yaml:\n%s", comp)
	}
	e.commit("adopt the lab cluster")
	if out := e.mustRun(0, "adopt", "--cluster", "lab"); !strings.Contains(out, "adopt: clusters/lab/resources.yaml already lists every complete manifest\n") {
		t.Errorf("after the update:\n%s", out)
	}

	// The diff of the adopted repository: one claim per guest, nothing else; the settings the manifests do
	// not carry are shown as gaps, in text and JSON.
	js := e.mustRun(0, "diff", "--cluster", "lab", "--output", "json")
	var doc struct {
		Clusters []struct {
			Operations []struct {
				Action string `json:"action"`
				Ref    string `json:"ref"`
			} `json:"operations"`
			Gaps []struct {
				Kind, Name, Key, Value string
				Managed                bool
			} `json:"gaps"`
		} `json:"clusters"`
	}
	if err := json.Unmarshal([]byte(js), &doc); err != nil || len(doc.Clusters) != 1 {
		t.Fatalf("diff json (%v):\n%s", err, js)
	}
	var ops []string
	for _, op := range doc.Clusters[0].Operations {
		ops = append(ops, op.Action+" "+op.Ref)
	}
	slices.Sort(ops)
	want := []string{"claim-tag LXC/cache", "claim-tag TemplateVM/debian-tpl", "claim-tag VM/build", "claim-tag VM/web-100"}
	if !slices.Equal(ops, want) {
		t.Errorf("diff operations %q, want %q\n%s", ops, want, js)
	}
	if !slices.ContainsFunc(doc.Clusters[0].Gaps, func(g struct {
		Kind, Name, Key, Value string
		Managed                bool
	}) bool {
		return g.Kind == "VM" && g.Name == "build" && g.Key == "balloon" && g.Value == "0" && g.Managed
	}) {
		t.Errorf("the diff does not show the gap balloon=0 of VM/build:\n%s", js)
	}
	if text := e.mustRun(0, "diff", "--cluster", "lab"); !strings.Contains(text, "  gap: VM/build pve2/101 balloon=0 (memory ballooning is not modelled)\n") {
		t.Errorf("the text diff does not show the gap:\n%s", text)
	}
}

// --cluster is required and must be a configured cluster; the JSON report is one document.
func TestAdoptNeedsAKnownClusterAndReportsJSON(t *testing.T) {
	e := newAdoptEnv(t)
	if _, errOut, code := e.run("adopt"); code != 1 || !strings.Contains(errOut, "adopt requires an explicit --cluster=<name>; configured clusters: [lab other]") {
		t.Errorf("without --cluster: exit %d, %s", code, errOut)
	}
	if _, errOut, code := e.run("adopt", "--cluster", "prod"); code != 1 || !strings.Contains(errOut, `--cluster "prod" is not in pve.clusters (known: [lab other])`) {
		t.Errorf("unknown cluster: exit %d, %s", code, errOut)
	}
	js := e.mustRun(0, "adopt", "--cluster", "lab", "--node", "pve2", "--output", "json")
	var doc struct {
		Cluster   string   `json:"cluster"`
		ReadOnly  bool     `json:"read_only"`
		Nodes     []string `json:"nodes"`
		Manifests []struct {
			Path     string `json:"path"`
			Complete bool   `json:"complete"`
		} `json:"manifests"`
		Gaps []struct {
			Key string `json:"key"`
		} `json:"gaps"`
	}
	if err := json.Unmarshal([]byte(js), &doc); err != nil {
		t.Fatalf("json: %v\n%s", err, js)
	}
	if doc.Cluster != "lab" || !doc.ReadOnly || !slices.Equal(doc.Nodes, []string{"pve2"}) || len(doc.Manifests) != 2 {
		t.Errorf("json report:\n%s", js)
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// Adoption reads the work tree as validate does: a composition linked out of the repository is refused by
// name, and neither read nor replaced by a file carrying what it points to.
func TestAdoptionDoesNotReadOrWriteThroughALinkLeavingTheRepository(t *testing.T) {
	tmp := t.TempDir()
	root := filepath.Join(tmp, "repo")
	outside := filepath.Join(tmp, "ci.env")
	const secret = "PVE_TOKEN=root@pam!ci=0f1e2d3c-4b5a-6978-8695-a4b3c2d1e0f9\n"
	if err := os.WriteFile(outside, []byte(secret), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, "clusters", "lab"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../../../ci.env", filepath.Join(root, "clusters", "lab", "resources.yaml")); err != nil {
		t.Fatal(err)
	}
	res := adopt.Result{Cluster: "lab", Manifests: []adopt.Manifest{{Path: "vm/lab/web.yaml", Content: []byte("# adopted\n")}}}
	_, err := writeAdoption(root, "lab", res, true)
	if err == nil || !strings.Contains(err.Error(), "symbolic link clusters/lab/resources.yaml leads outside the repository") {
		t.Fatalf("writeAdoption = %v, want the link refused by name", err)
	}
	if strings.Contains(err.Error(), "PVE_TOKEN") {
		t.Errorf("the error carries the target's content: %v", err)
	}
	if got, _ := os.ReadFile(outside); string(got) != secret {
		t.Errorf("the file outside the repository changed: %q", got)
	}
	if info, err := os.Lstat(filepath.Join(root, "clusters", "lab", "resources.yaml")); err != nil || info.Mode()&os.ModeSymlink == 0 {
		t.Errorf("the link was replaced: %v, %v", info, err)
	}
}

// A cluster whose own firewall was enabled by hand: adopt offers the block that declares it (in text and
// JSON); added to the cluster's config.yaml it is managed, adopt offers it no more, and the diff plans no
// change to it.
func TestAdoptOffersTheClustersOwnFirewallWhichThenPlansNoChange(t *testing.T) {
	e := newAdoptEnv(t)
	for _, w := range []struct {
		method, path string
		params       url.Values
	}{
		{http.MethodPost, "/cluster/firewall/rules", url.Values{"type": {"in"}, "action": {"ACCEPT"}, "proto": {"tcp"},
			"dport": {"22,8006"}, "source": {"192.0.2.0/24"}, "comment": {"administrators"}, "enable": {"1"}}},
		{http.MethodPut, "/cluster/firewall/options", url.Values{"enable": {"1"}, "policy_in": {"DROP"}}},
	} {
		if err := e.sim.AdminRequest(w.method, w.path, w.params); err != nil {
			t.Fatal(err)
		}
	}

	text := e.mustRun(0, "adopt", "--cluster", "lab", "--update-resources")
	offer := "adopt: the cluster's own firewall is not managed by ProxOps; to manage it as it is, add under pve.clusters.lab in clusters/lab/config.yaml:\n" +
		"  firewall:\n    manage-cluster: true\n    enabled: true\n    policy-in: DROP\n    rules:\n      - type: in\n"
	if !strings.Contains(text, offer) {
		t.Errorf("the report does not offer the cluster's firewall:\n%s", text)
	}
	var doc struct {
		ClusterFirewall *struct{ File, Under, YAML string } `json:"cluster_firewall"`
	}
	js := e.mustRun(0, "adopt", "--cluster", "lab", "--output", "json")
	if err := json.Unmarshal([]byte(js), &doc); err != nil || doc.ClusterFirewall == nil ||
		doc.ClusterFirewall.File != "clusters/lab/config.yaml" || doc.ClusterFirewall.Under != "pve.clusters.lab" {
		t.Fatalf("json report (%v):\n%s", err, js)
	}
	config := e.read("clusters/lab/config.yaml")
	for line := range strings.SplitSeq(strings.TrimRight(doc.ClusterFirewall.YAML, "\n"), "\n") {
		config += "      " + line + "\n"
	}
	e.write("clusters/lab/config.yaml", config)
	e.commit("adopt the lab cluster and its firewall")

	if again := e.mustRun(0, "adopt", "--cluster", "lab"); strings.Contains(again, "cluster's own firewall") {
		t.Errorf("a managed cluster firewall is offered again:\n%s", again)
	}
	var diff struct {
		Clusters []struct {
			Operations []struct {
				Action string `json:"action"`
			} `json:"operations"`
		} `json:"clusters"`
	}
	out := e.mustRun(0, "diff", "--cluster", "lab", "--output", "json")
	if err := json.Unmarshal([]byte(out), &diff); err != nil || len(diff.Clusters) != 1 {
		t.Fatalf("diff json (%v):\n%s", err, out)
	}
	for _, op := range diff.Clusters[0].Operations {
		if op.Action != "claim-tag" {
			t.Errorf("the adopted repository plans %s:\n%s", op.Action, out)
		}
	}
}
