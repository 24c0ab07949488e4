package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/proxops/proxops/internal/pvesim"
)

// scaleEnv is a committed repository of n small VMs spread over the nodes of a simulator that answers at
// once and finishes every task at once, and a data directory.
type scaleEnv struct {
	sim  *pvesim.Sim
	srv  *httptest.Server
	repo string
	data string
}

func newScaleEnv(tb testing.TB, guests, nodes int) *scaleEnv {
	tb.Helper()
	spec := pvesim.DefaultSpec()
	spec.Nodes = nil
	var names []string
	for n := 1; n <= nodes; n++ {
		names = append(names, fmt.Sprintf("pve%d", n))
		spec.Nodes = append(spec.Nodes, pvesim.NodeSpec{Name: names[n-1]})
	}
	for i := range spec.Storages {
		spec.Storages[i].TotalBytes = 64 << 40 // room for every guest's disk
	}
	spec.TaskDurations = map[string]pvesim.Duration{"default": 0}
	sim, err := pvesim.New(spec)
	if err != nil {
		tb.Fatal(err)
	}
	srv := httptest.NewServer(sim)
	tb.Cleanup(func() { srv.Close(); sim.WaitTasks() })
	e := &scaleEnv{sim: sim, srv: srv, repo: filepath.Join(tb.TempDir(), "repo"), data: filepath.Join(tb.TempDir(), "data")}
	files := map[string]string{"clusters/lab/config.yaml": fmt.Sprintf("pve:\n  clusters:\n    lab:\n      base-url: %s\n      nodes: [%s]\n",
		srv.URL, strings.Join(names, ", "))}
	var list strings.Builder
	list.WriteString("resources:\n")
	for i := range guests {
		name := fmt.Sprintf("g-%05d", i)
		files["vm/lab/"+name+".yaml"] = benchVM(name, 1000+i, names[i%nodes], 512)
		fmt.Fprintf(&list, "  - ../../vm/lab/%s.yaml\n", name)
	}
	files["clusters/lab/resources.yaml"] = list.String()
	for p, c := range files {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(e.repo, p)), 0o755); err != nil {
			tb.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(e.repo, p), []byte(c), 0o644); err != nil {
			tb.Fatal(err)
		}
	}
	for _, args := range [][]string{{"init", "-q", "-b", "main"}, {"add", "-A"}, {"commit", "-q", "-m", "guests"}} {
		if out, err := exec.Command("git", append([]string{"-C", e.repo, "-c", "user.name=b", "-c", "user.email=b@example.invalid"}, args...)...).CombinedOutput(); err != nil {
			tb.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	return e
}

// proxops runs one proxops command in this process on the environment's repository and data directory and
// returns its output; it fails unless the command exits with want.
func (e *scaleEnv) proxops(tb testing.TB, want int, args ...string) string {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	cmd := newRootCommand()
	var out, errOut bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetArgs(append(args, "--repo", e.repo, "--data-dir", e.data))
	err := cmd.ExecuteContext(ctx)
	code := 0
	if ee := (*exitError)(nil); errors.As(err, &ee) {
		code = ee.code
	} else if err != nil {
		code = 1
	}
	if code != want {
		tb.Fatalf("proxops %s: exit %d (%v), want %d\n%s\n%s", strings.Join(args, " "), code, err, want, tail(out.String()), tail(errOut.String()))
	}
	return out.String()
}

func tail(s string) string {
	if len(s) > 4000 {
		return "…" + s[len(s)-4000:]
	}
	return s
}

// floor replays the GET requests the simulator logged since its last reset with a plain client,
// concurrency requests at a time, decoding each answer from JSON, and returns how long that took.
func (e *scaleEnv) floor(tb testing.TB, concurrency int) time.Duration {
	tb.Helper()
	var paths []string
	for _, r := range e.sim.Requests() {
		if r.Method == http.MethodGet {
			paths = append(paths, r.Path)
		}
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: concurrency}}
	defer client.CloseIdleConnections()
	work := make(chan string)
	var wg sync.WaitGroup
	var failed sync.Once
	var ferr error
	start := time.Now()
	for range concurrency {
		wg.Go(func() {
			for p := range work {
				req, _ := http.NewRequest(http.MethodGet, e.srv.URL+"/api2/json"+p, nil)
				req.Header.Set("Authorization", "PVEAPIToken="+pvesim.DefaultRootTokenID+"="+pvesim.DefaultRootTokenSecret)
				res, err := client.Do(req)
				if err == nil {
					// Read as any client of the API reads an answer: decoded from JSON.
					var answer struct {
						Data any `json:"data"`
					}
					err = json.NewDecoder(res.Body).Decode(&answer)
					_, _ = io.Copy(io.Discard, res.Body)
					_ = res.Body.Close()
					if res.StatusCode != http.StatusOK {
						err = fmt.Errorf("GET %s: %s", p, res.Status)
					}
				}
				if err != nil {
					failed.Do(func() { ferr = err })
				}
			}
		})
	}
	for _, p := range paths {
		work <- p
	}
	close(work)
	wg.Wait()
	elapsed := time.Since(start)
	if ferr != nil {
		tb.Fatal(ferr)
	}
	return elapsed
}

// BenchmarkScale applies 1,000, 2,000, 5,000 and 10,000 guests over 8 nodes of a simulator without latency
// or task time, each through one `proxops apply` on a fresh data directory, then runs a converged `proxops
// diff` and measures what the same observe requests cost a plain concurrent client (the floor). From 5,000
// guests on it also runs the converged diff as its own process (the built binary) and reads its peak
// resident memory; after the 10,000 it starts `proxops up` on the converged data directory and reads its
// resident memory once idle. Reported: per-op-ms for each size and the ratio of 10,000 to 1,000 (target
// ≤ 1.2), diff/floor for each size (target ≤ 1.5 at 10,000), MB-diff-peak (target < 400 at 5,000) and
// MB-rss of the idle up (target < 400).
func BenchmarkScale(b *testing.B) {
	const nodes = 8
	b.Setenv("PROXOPS_PVE_TOKEN_VALUE", pvesim.DefaultRootTokenID+"="+pvesim.DefaultRootTokenSecret)
	b.Setenv("PROXOPS_PVE_USER", "")
	b.Setenv("HOME", b.TempDir())
	perOp := map[int]float64{}
	for _, guests := range []int{1000, 2000, 5000, 10000} {
		b.Run(fmt.Sprintf("guests=%d", guests), func(b *testing.B) {
			for range b.N {
				e := newScaleEnv(b, guests, nodes)
				start := time.Now()
				out := e.proxops(b, 0, "apply")
				apply := time.Since(start)
				if want := fmt.Sprintf("Apply complete: %d succeeded, 0 failed", guests); !strings.Contains(out, want) {
					b.Fatalf("apply: %s", tail(out))
				}
				if creates := e.sim.Count(http.MethodPost, "/nodes/{node}/qemu"); creates != guests {
					b.Fatalf("%d creates for %d guests", creates, guests)
				}
				e.sim.ResetLog()
				start = time.Now()
				e.proxops(b, 0, "diff", "--exit-code")
				diff := time.Since(start)
				floor := e.floor(b, nodes*8)
				perOp[guests] = apply.Seconds() * 1000 / float64(guests)
				b.ReportMetric(apply.Seconds(), "apply-s")
				b.ReportMetric(perOp[guests], "per-op-ms")
				b.ReportMetric(diff.Seconds(), "diff-s")
				b.ReportMetric(floor.Seconds(), "floor-s")
				b.ReportMetric(diff.Seconds()/floor.Seconds(), "diff/floor")
				if guests >= 5000 {
					b.ReportMetric(peakRSSMB(b, "diff", "--exit-code", "--repo", e.repo, "--data-dir", e.data), "MB-diff-peak")
				}
				if small, ok := perOp[1000]; ok && guests == 10000 {
					b.ReportMetric(perOp[guests]/small, "per-op-10k/1k")
					rss := idleProcess(b, append(os.Environ(), "SOPS_AGE_KEY=", "SOPS_AGE_KEY_FILE="), `"to":"converged"`,
						proxopsBinary(b), "up", "--repo", e.repo, "--data-dir", e.data, "--listen", "127.0.0.1:0")
					b.ReportMetric(rss, "MB-rss")
				}
			}
		})
	}
}

// One apply of a few hundred guests over eight nodes creates every guest exactly once, and the diff that
// follows finds nothing to do.
func TestApplyOfManyGuestsCreatesEachOnceAndConverges(t *testing.T) {
	const guests, nodes = 300, 8
	t.Setenv("PROXOPS_PVE_TOKEN_VALUE", pvesim.DefaultRootTokenID+"="+pvesim.DefaultRootTokenSecret)
	t.Setenv("PROXOPS_PVE_USER", "")
	t.Setenv("HOME", t.TempDir())
	e := newScaleEnv(t, guests, nodes)
	out := e.proxops(t, 0, "apply")
	if want := fmt.Sprintf("Apply complete: %d succeeded, 0 failed, 0 skipped.", guests); !strings.Contains(out, want) {
		t.Fatalf("apply: %s", tail(out))
	}
	created := map[string]int{}
	for _, r := range e.sim.Requests() {
		if r.Method == http.MethodPost && r.Template == "/nodes/{node}/qemu" && r.Status == http.StatusOK {
			created[r.Params["vmid"]]++
		}
	}
	if len(created) != guests {
		t.Fatalf("%d guests created, want %d", len(created), guests)
	}
	for vmid, n := range created {
		if n != 1 {
			t.Fatalf("vmid %s created %d times", vmid, n)
		}
	}
	for i := range guests {
		if !e.sim.Exists(1000 + i) {
			t.Fatalf("vmid %d missing", 1000+i)
		}
	}
	if diff := e.proxops(t, 0, "diff", "--exit-code"); diff != "=== lab ===\nno drift — PVE matches git\n" {
		t.Fatalf("diff after apply:\n%s", tail(diff))
	}
}
