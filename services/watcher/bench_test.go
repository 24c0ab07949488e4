package watcher_test

import (
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
