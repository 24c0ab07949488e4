package watcher_test

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/proxops/proxops/services/watcher"
)

// BenchmarkWebhookToRepoChanged measures a push webhook received until its RepoChanged is published: request
// verification, the ref listing, the fetch into the mirror, the snapshot of a 100-guest repository and the
// publish (to the in-memory publisher). Commits are made outside the timer.
func BenchmarkWebhookToRepoChanged(b *testing.B) {
	root := b.TempDir()
	repo := newWorkRepo(b, root)
	seed(repo)
	for i := range 100 {
		repo.write("vm/base/guest-"+strconv.Itoa(i)+".yaml", "apiVersion: proxops/v1\nkind: VM\nmetadata:\n  name: guest-"+strconv.Itoa(i)+"\nspec:\n  vmid: "+strconv.Itoa(1000+i)+"\n  node: pve1\n  cores: 2\n  memory: 2048\n")
	}
	first := repo.commitAndPush("100 guests")
	srv := newGitHTTPServer(b, root, false, "", "")
	r := startWatcher(b, watcher.Config{
		URL: srv.url("repo.git"), DataDir: b.TempDir(), PollInterval: time.Hour, DriftInterval: -1,
	}, newTestBus(b))
	r.waitCommit(first, watcher.TriggerStartup)

	var latencies []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		repo.write("vm/base/guest-0.yaml", "apiVersion: proxops/v1\nkind: VM\nmetadata:\n  name: guest-0\nspec:\n  vmid: 1000\n  cores: "+strconv.Itoa(i+3)+"\n")
		sha := repo.commitAndPush("change " + strconv.Itoa(i))
		req := pushHook(watcher.ProviderGitHub, sha).request("http://" + r.w.ListenAddr())
		select {
		case <-r.bus.pub.notify:
		default:
		}
		b.StartTimer()

		start := time.Now()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusAccepted {
			b.Fatalf("webhook answered %d", resp.StatusCode)
		}
		for len(r.bus.pub.forCommit(sha)) == 0 {
			select {
			case <-r.bus.pub.notify:
			case <-time.After(waitTimeout):
				b.Fatal("no event")
			}
		}
		latencies = append(latencies, time.Since(start))
	}
	b.StopTimer()
	slices.Sort(latencies)
	b.ReportMetric(float64(latencies[len(latencies)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(latencies[len(latencies)*99/100].Microseconds())/1000, "p99-ms")
}

// BenchmarkSnapshotBranch reads a commit of 10,000 small manifests that git has packed, as a converged diff of
// 10,000 guests does first.
func BenchmarkSnapshotBranch(b *testing.B) {
	repo := newWorkRepo(b, b.TempDir())
	runGit(b, repo.dir, "config", "gc.auto", "0") // packed below, once, rather than by a commit in the background
	for i := range 10000 {
		name := fmt.Sprintf("g-%05d", i)
		repo.write("vm/lab/"+name+".yaml", "apiVersion: proxops/v1alpha1\nkind: VM\nmetadata: {name: "+name+"}\nspec:\n  node: pve1\n  vmid: "+strconv.Itoa(1000+i)+"\n  memory: 512MiB\n")
	}
	repo.commit("10,000 guests")
	runGit(b, repo.dir, "repack", "-a", "-d", "-q")
	for b.Loop() {
		snap, err := watcher.SnapshotBranch(b.Context(), repo.dir, "main")
		if err != nil || len(snap.Files) != 10000 {
			b.Fatalf("%d files, %v", len(snap.Files), err)
		}
	}
}
