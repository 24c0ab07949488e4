package main

import (
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/proxops/proxops/internal/pvesim"
	"github.com/proxops/proxops/internal/testcorpus"
)

// legacySim is a simulated cluster shaped like the predecessor's example cluster: nodes pve01 and pve02,
// the storages and bridges its example manifests use, and root@pam with a password.
func legacySim(t *testing.T) *httptest.Server {
	t.Helper()
	spec := pvesim.Spec{Version: "9.1.1", ClusterName: "example",
		Nodes: []pvesim.NodeSpec{{Name: "pve01"}, {Name: "pve02"}},
		Storages: []pvesim.StorageSpec{
			{ID: "local", Type: "dir", Content: []string{"iso", "vztmpl", "import", "images", "rootdir", "snippets"}},
			{ID: "local-lvm", Type: "lvmthin", Content: []string{"images", "rootdir"}},
			{ID: "vm_disks", Type: "lvmthin", Content: []string{"images", "rootdir"}},
		},
		Bridges:       []string{"vmbr0", "vmbr2"},
		Users:         []pvesim.UserSpec{{Name: "root@pam", Password: "legacy-root-password"}},
		TaskDurations: map[string]pvesim.Duration{"default": pvesim.Duration(5 * time.Millisecond)},
	}
	sim, err := pvesim.New(spec)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(sim)
	t.Cleanup(func() { srv.Close(); sim.WaitTasks() })
	return srv
}

// The predecessor's command line on the predecessor's example repository: a process configuration outside
// the repository (--config, then PROXOPS_CONFIG) declares the cluster inline with the simulator's base-url
// (replacing the repository's clusters/example/config.yaml, whose endpoint is fictional) and a secrets
// file for the cloud-init references; the PVE credentials come from the environment, ticket auth as
// root@pam. diff plans exactly what the planner's golden plan of the examples documents, apply -n prints
// the same bytes, and proxops run (up), started in the work tree with nothing but PROXOPS_CONFIG, reconciles
// it.
func TestRunWithAPredecessorConfigurationReconcilesTheUpstreamExamples(t *testing.T) {
	root := repoRoot(t)
	srv := legacySim(t)
	e := &demoEnv{t: t, repo: filepath.Join(t.TempDir(), "repo"), data: filepath.Join(t.TempDir(), "data")}
	if err := os.CopyFS(e.repo, os.DirFS(testcorpus.Dir("upstream-examples"))); err != nil {
		t.Fatal(err)
	}
	e.git("init", "-q", "-b", "main")
	e.commit("the predecessor's examples")
	etc := t.TempDir()
	if err := os.WriteFile(filepath.Join(etc, "secrets.sops.yaml"), mustRead(t, filepath.Join(root, "internal", "secrets", "testdata", "valid.sops.yaml")), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := writeFile(t, filepath.Join(etc, "proxops.yaml"), `# The predecessor's process configuration: a bootstrap cluster and the repository's path.
pve:
  auth: token
  clusters:
    example:
      base-url: `+srv.URL+`
      nodes: [pve01, pve02]
      secrets-file: secrets.sops.yaml
git:
  path: `+e.repo+`
reconcile:
  poll-interval: 1s
listen: 127.0.0.1:0
data-dir: `+e.data+`
`)
	t.Setenv("HOME", t.TempDir())
	t.Setenv("SOPS_AGE_KEY", "")
	t.Setenv("SOPS_AGE_KEY_FILE", filepath.Join(root, "internal", "secrets", "testdata", "age", "lab.agekey"))
	t.Setenv("PROXOPS_PVE_TOKEN_VALUE", "")
	t.Setenv("PROXOPS_PVE_USER", "root@pam")
	t.Setenv("PROXOPS_PVE_PASSWORD", "legacy-root-password")
	t.Setenv("PROXOPS_DATA_DIR", "")
	t.Setenv(envConfig, "")

	diff := e.mustRunPlain(0, "--config", cfg, "--pve-auth", "ticket", "diff")
	golden := string(mustRead(t, filepath.Join(root, "internal", "plan", "testdata", "cases", "upstream-examples-empty-cluster", "plan.txt")))
	if withoutPlanID(diff) != withoutPlanID(golden) {
		t.Fatalf("diff of the examples:\n%s\nwant (internal/plan/testdata/cases/upstream-examples-empty-cluster/plan.txt):\n%s", diff, golden)
	}
	if dry := e.mustRunPlain(0, "--config", cfg, "--pve-auth", "ticket", "apply", "-n"); dry != diff {
		t.Fatalf("apply -n differs from diff:\n%s", dry)
	}

	t.Setenv(envConfig, cfg)
	t.Chdir(e.repo)
	out := e.mustRunPlain(0, "run", "--once", "--pve-auth", "ticket")
	if !strings.Contains(out, "example: converged (14 operations applied)") {
		t.Fatalf("run --once:\n%s", out)
	}
	after := e.mustRunPlain(0, "diff", "--pve-auth", "ticket")
	if strings.Contains(after, "=== will") || strings.Contains(after, "=== power") || !strings.Contains(after, "anomaly      TemplateCT/debian-tpl") {
		t.Fatalf("diff after run:\n%s", after)
	}
}

// withoutPlanID drops the plan's content id line (it names the observed state, which differs).
func withoutPlanID(s string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if !strings.HasPrefix(l, "plan ") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
