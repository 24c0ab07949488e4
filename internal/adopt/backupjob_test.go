package adopt_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/url"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/proxops/proxops/internal/adopt"
	"github.com/proxops/proxops/internal/inventory"
	"github.com/proxops/proxops/internal/plan"
	"github.com/proxops/proxops/internal/pve"
	"github.com/proxops/proxops/internal/pvesim"
)

// postJob creates a backup job on the simulator, outside ProxOps.
func (l *lab) postJob(t *testing.T, form url.Values) {
	t.Helper()
	if err := l.sim.AdminRequest(http.MethodPost, "/cluster/backup", form); err != nil {
		t.Fatalf("create job %v: %v", form, err)
	}
}

// observeWithJobs is observe with the cluster's pools and backup jobs read from the first node.
func (l *lab) observeWithJobs(t *testing.T, cluster string, nodes ...string) inventory.Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl, err := pve.New(ctx, pve.Config{BaseURL: l.srv.URL, TokenID: pvesim.DefaultRootTokenID,
		TokenSecret: pvesim.DefaultRootTokenSecret, ReadBackoff: time.Millisecond}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	out := inventory.Cluster{Name: cluster}
	for i, n := range nodes {
		inv, err := cl.Observe(ctx, pve.ObserveRequest{Cluster: cluster, Node: n, AllContent: true, Pools: i == 0, BackupJobs: i == 0})
		if err != nil {
			t.Fatalf("observe %s: %v", n, err)
		}
		out.Nodes = append(out.Nodes, inv)
	}
	return out
}

// Adoption writes a BackupJob manifest per live job (vmids as the names of the adopted guests, the options the
// kind does not model as gaps) and, committed, the repository plans the claim of each job and of each guest's
// tag and nothing else.
func TestAdoptedBackupJobsPlanToTheirClaimOnly(t *testing.T) {
	l := newLab(t, representativeSpec())
	l.postJob(t, url.Values{"id": {"nightly"}, "schedule": {"21:00"}, "storage": {"local"}, "all": {"1"}, "exclude": {"900,910"},
		"compress": {"zstd"}, "mode": {"snapshot"}, "prune-backups": {"keep-last=3,keep-weekly=2"}, "bwlimit": {"10000"},
		"comment": {"every guest"}})
	l.postJob(t, url.Values{"id": {"web_Weekly"}, "schedule": {"sat 03:00"}, "vmid": {"100,102"}, "mode": {"stop"},
		"enabled": {"0"}, "prune-backups": {"keep-all=1"}})
	observed := l.observeWithJobs(t, "lab", "pve1", "pve2")
	res, err := adopt.Adopt(adopt.Input{Cluster: "lab", Observed: observed, Templates: operatorTemplates,
		Keys: keyStore{"admin": keyAdmin, "deploy": keyDeploy}})
	if err != nil {
		t.Fatal(err)
	}
	nightly := find(t, res, "backup/lab/nightly.yaml")
	checkGolden(t, filepath.Join("testdata", "backupjob", "nightly.yaml"), nightly.Content)
	weekly := find(t, res, "backup/lab/web-weekly.yaml")
	checkGolden(t, filepath.Join("testdata", "backupjob", "web-weekly.yaml"), weekly.Content)
	if !nightly.Complete() || !weekly.Complete() {
		t.Fatalf("incomplete: %v %v", nightly.Incomplete, weekly.Incomplete)
	}
	var gaps []string
	for _, g := range res.Gaps {
		if g.Kind == "BackupJob" {
			gaps = append(gaps, g.Name+" "+g.Key+"="+g.Value)
		}
	}
	if d := cmp.Diff([]string{"nightly bwlimit=10000"}, gaps); d != "" {
		t.Errorf("backup job gaps (-want +got):\n%s", d)
	}

	dir := t.TempDir()
	writeRepository(t, dir, "lab", []string{"pve1", "pve2"}, res)
	p := planRepository(t, dir, "lab", observed, keyStore{"admin": keyAdmin, "deploy": keyDeploy})
	var jobs []string
	for _, op := range p.Operations {
		switch op.Action {
		case plan.ActionClaimTag:
		case plan.ActionClaimClusterObject:
			jobs = append(jobs, op.Ref)
		default:
			t.Errorf("operation %s %s: want only claims", op.Action, op.Ref)
		}
	}
	slices.Sort(jobs)
	if d := cmp.Diff([]string{"BackupJob/nightly", "BackupJob/web-weekly"}, jobs); d != "" {
		t.Errorf("claimed jobs (-want +got):\n%s", d)
	}
}
