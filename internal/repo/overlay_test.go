package repo_test

import (
	"io/fs"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/proxops/proxops/internal/repo"
)

func mustParse(t *testing.T, file, text string) *repo.Config {
	t.Helper()
	cfg, diags := repo.ParseConfigFile(file, []byte(text))
	if diags.HasErrors() {
		t.Fatalf("%s: %v", file, diags)
	}
	return cfg
}

// A process configuration laid over another wins for the keys it sets and only those; clusters are merged,
// its entry winning; neither input changes.
func TestOverlayTakesTheKeysTheOverlaySets(t *testing.T) {
	base := mustParse(t, "proxops.yaml", "listen: 127.0.0.1:7000\nreconcile:\n  poll-interval: 45s\n  prune-budget: 5\n"+
		"pve:\n  clusters:\n    a:\n      base-url: https://a.example.invalid:8006\n    b:\n      base-url: https://b.example.invalid:8006\n")
	over := mustParse(t, "/etc/proxops/proxops.yaml", "reconcile:\n  poll-interval: 10s\n  prune-budget: 3\n"+
		"pve:\n  clusters:\n    b:\n      base-url: https://b2.example.invalid:8006\n")
	got := repo.Overlay(base, over)
	if got.Listen != "127.0.0.1:7000" || got.Reconcile.PollInterval != 10*time.Second || got.Reconcile.PruneBudget != 3 ||
		got.Reconcile.DriftInterval != 5*time.Minute {
		t.Fatalf("listen %s poll %s budget %d drift %s", got.Listen, got.Reconcile.PollInterval, got.Reconcile.PruneBudget, got.Reconcile.DriftInterval)
	}
	if got.PVE.Clusters["a"].BaseURL != "https://a.example.invalid:8006" || got.PVE.Clusters["b"].BaseURL != "https://b2.example.invalid:8006" {
		t.Fatalf("clusters: a %s, b %s", got.PVE.Clusters["a"].BaseURL, got.PVE.Clusters["b"].BaseURL)
	}
	if _, ok := got.Positions["reconcile.poll-interval"]; !ok || got.File != "proxops.yaml" {
		t.Fatalf("positions %v file %s", got.Positions, got.File)
	}
	if base.Reconcile.PollInterval != 45*time.Second || base.PVE.Clusters["b"].BaseURL != "https://b.example.invalid:8006" {
		t.Fatal("the base changed")
	}
	if repo.Overlay(base, nil) != base {
		t.Fatal("a nil overlay is not the base")
	}
}

// A process configuration given to LoadWith replaces the repository's cluster file of a cluster it declares
// (its composition still comes from the repository), and leaves the other clusters as they are.
func TestLoadWithAProcessConfigurationReplacesItsClusters(t *testing.T) {
	fsys := fstest.MapFS{
		"proxops.yaml":                 {Data: []byte("reconcile:\n  prune-budget: 5\n  poll-interval: 45s\n")},
		"clusters/lab/config.yaml":     {Data: []byte("pve:\n  clusters:\n    lab:\n      base-url: https://pve.example.invalid:8006\n      nodes: [pve1]\n")},
		"clusters/lab/resources.yaml":  {Data: []byte("resources: []\n")},
		"clusters/edge/config.yaml":    {Data: []byte("pve:\n  clusters:\n    edge:\n      base-url: https://edge.example.invalid:8006\n")},
		"clusters/edge/resources.yaml": {Data: []byte("resources: []\n")},
	}
	process := mustParse(t, "/etc/proxops/proxops.yaml", "reconcile:\n  prune-budget: 0\n"+
		"pve:\n  clusters:\n    lab:\n      base-url: http://127.0.0.1:8006\n      nodes: [pve1, pve2]\n      secrets-file: lab.sops.yaml\n")
	r := repo.LoadWith(fsys, repo.LoadOptions{Process: process})
	if ds := r.AllDiagnostics(); ds.HasErrors() {
		t.Fatalf("diagnostics:\n%v", ds)
	}
	lab, edge := r.Cluster("lab"), r.Cluster("edge")
	if lab == nil || lab.Config.BaseURL != "http://127.0.0.1:8006" || lab.Config.File != "/etc/proxops/proxops.yaml" ||
		lab.Config.SecretsPath() != "/etc/proxops/lab.sops.yaml" || len(lab.Config.Nodes) != 2 {
		t.Fatalf("lab: %+v", lab.Config)
	}
	if edge == nil || edge.Config.BaseURL != "https://edge.example.invalid:8006" || edge.Config.File != "clusters/edge/config.yaml" {
		t.Fatalf("edge: %+v", edge.Config)
	}
	if r.Config.Reconcile.PruneBudget != 0 || r.Config.Reconcile.PollInterval != 45*time.Second {
		t.Fatalf("settings: budget %d poll %s", r.Config.Reconcile.PruneBudget, r.Config.Reconcile.PollInterval)
	}
	plain := repo.Load(fsys)
	if plain.Cluster("lab").Config.BaseURL != "https://pve.example.invalid:8006" || plain.Config.Reconcile.PruneBudget != 5 {
		t.Fatal("Load without a process configuration changed")
	}
}

// openLog is a file system that records every file opened (it offers only Open, so every read opens).
type openLog struct {
	files  fstest.MapFS
	opened map[string]bool
}

func (o *openLog) Open(name string) (fs.File, error) {
	o.opened[name] = true
	return o.files.Open(name)
}

// A configuration-only load reads proxops.yaml and the clusters' config files and no manifest: it finds the
// clusters and settings a full load finds, without their resources, and reports nothing about manifests.
func TestAConfigurationOnlyLoadReadsNoManifest(t *testing.T) {
	files := fstest.MapFS{
		"proxops.yaml":                 {Data: []byte("reconcile:\n  prune-budget: 5\n")},
		"clusters/lab/config.yaml":     {Data: []byte("pve:\n  clusters:\n    lab:\n      base-url: https://pve.example.invalid:8006\n      nodes: [pve1]\n")},
		"clusters/lab/resources.yaml":  {Data: []byte("resources:\n  - ../../vm/lab/web.yaml\n")},
		"clusters/edge/config.yaml":    {Data: []byte("pve:\n  clusters:\n    edge:\n      base-url: https://edge.example.invalid:8006\n")},
		"clusters/edge/resources.yaml": {Data: []byte("resources: []\n")},
		"vm/lab/web.yaml":              {Data: []byte("kind: VM\nname: web\nspec: [broken\n")},
	}
	fullLog := &openLog{files: files, opened: map[string]bool{}}
	full := repo.Load(fullLog)
	if !full.ClusterDiagnostics("lab").HasErrors() || !fullLog.opened["vm/lab/web.yaml"] {
		t.Fatalf("the full load does not read and report the broken manifest: %v", full.ClusterDiagnostics("lab"))
	}
	log := &openLog{files: files, opened: map[string]bool{}}
	r := repo.LoadWith(log, repo.LoadOptions{ConfigOnly: true})
	if got, want := r.ClusterNames(), full.ClusterNames(); !slices.Equal(got, want) {
		t.Fatalf("clusters %v, the full load %v", got, want)
	}
	if r.Cluster("lab").Config.BaseURL != "https://pve.example.invalid:8006" || r.Config.Reconcile.PruneBudget != 5 {
		t.Fatalf("config %+v, settings %+v", r.Cluster("lab").Config, r.Config.Reconcile)
	}
	if ds := r.AllDiagnostics(); len(ds) != 0 {
		t.Fatalf("diagnostics of a configuration-only load: %v", ds)
	}
	if len(r.Cluster("lab").Resources) != 0 {
		t.Fatalf("resources read: %d", len(r.Cluster("lab").Resources))
	}
	// Only the root, proxops.yaml and the clusters' directory (config files; compositions are only checked to
	// exist) are opened.
	for name := range log.opened {
		if name != "." && name != "proxops.yaml" && name != repo.ClustersDir && !strings.HasPrefix(name, repo.ClustersDir+"/") {
			t.Errorf("opened %s", name)
		}
	}
}
