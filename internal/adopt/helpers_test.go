package adopt_test

import (
	"context"
	"errors"
	"flag"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/proxops/proxops/internal/adopt"
	"github.com/proxops/proxops/internal/inventory"
	"github.com/proxops/proxops/internal/plan"
	"github.com/proxops/proxops/internal/pve"
	"github.com/proxops/proxops/internal/pvesim"
	"github.com/proxops/proxops/internal/repo"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata")

// lab is a simulated PVE cluster behind a loopback HTTP server, observed through the real adapter.
type lab struct {
	sim *pvesim.Sim
	srv *httptest.Server
}

func newLab(t *testing.T, spec pvesim.Spec) *lab {
	t.Helper()
	if spec.Seed == 0 {
		spec.Seed = 11
	}
	sim, err := pvesim.New(spec)
	if err != nil {
		t.Fatalf("simulator: %v", err)
	}
	srv := httptest.NewServer(sim)
	t.Cleanup(func() { srv.Close(); sim.WaitTasks() })
	return &lab{sim: sim, srv: srv}
}

// observe takes an adoption inventory of each node: every guest and the content of every storage.
func (l *lab) observe(t *testing.T, cluster string, nodes ...string) inventory.Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl, err := pve.New(ctx, pve.Config{BaseURL: l.srv.URL, TokenID: pvesim.DefaultRootTokenID,
		TokenSecret: pvesim.DefaultRootTokenSecret, ReadBackoff: time.Millisecond}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	out := inventory.Cluster{Name: cluster}
	for _, n := range nodes {
		inv, err := cl.Observe(ctx, pve.ObserveRequest{Cluster: cluster, Node: n, AllContent: true})
		if err != nil {
			t.Fatalf("observe %s: %v", n, err)
		}
		out.Nodes = append(out.Nodes, inv)
	}
	return out
}

// writes lists the requests that were not reads.
func (l *lab) writes() []string {
	var out []string
	for _, r := range l.sim.Requests() {
		if r.Method != http.MethodGet {
			out = append(out, r.Method+" "+r.Path)
		}
	}
	return out
}

// writeRepository writes a repository for one cluster: its config, the adopted files, and a composition
// listing the complete ones.
func writeRepository(t *testing.T, dir, cluster string, nodes []string, res adopt.Result) {
	t.Helper()
	var b strings.Builder
	b.WriteString("pve:\n  clusters:\n    " + cluster + ":\n      base-url: https://pve.example.invalid:8006\n      nodes:\n")
	for _, n := range nodes {
		b.WriteString("        - " + n + "\n")
	}
	write(t, filepath.Join(dir, "clusters", cluster, "config.yaml"), b.String())
	comp := "resources:\n"
	for _, p := range res.Composition() {
		comp += "  - " + p + "\n"
	}
	write(t, filepath.Join(dir, "clusters", cluster, "resources.yaml"), comp)
	for _, m := range res.Manifests {
		write(t, filepath.Join(dir, filepath.FromSlash(m.Path)), string(m.Content))
	}
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// planRepository loads a repository and plans one cluster against an observed state with the real planner
// core; the repository must load without an error.
func planRepository(t *testing.T, dir, cluster string, observed inventory.Cluster, secrets plan.SecretResolver) plan.Plan {
	t.Helper()
	r := repo.Load(os.DirFS(dir))
	if ds := r.ClusterDiagnostics(cluster); ds.HasErrors() {
		t.Fatalf("the adopted repository does not load:\n%s", ds.Errors().Error())
	}
	p, err := plan.Diff(plan.Input{Cluster: r.Cluster(cluster), Observed: observed, Secrets: secrets})
	var rej *plan.RejectedError
	if errors.As(err, &rej) {
		t.Fatalf("the adopted repository is rejected: %v", err)
	}
	if err != nil {
		t.Fatalf("plan: %v", err)
	}
	return p
}

// checkGolden compares got with a golden file (rewritten with -update).
func checkGolden(t *testing.T, path string, got []byte) {
	t.Helper()
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read golden (run go test -update): %v", err)
	}
	if string(want) != string(got) {
		t.Errorf("%s differs (run go test -update to accept):\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}
