package pipeline_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/proxops/proxops/internal/bus"
	"github.com/proxops/proxops/internal/plan"
	"github.com/proxops/proxops/internal/pvesim"
)

// livePool is a pool as PVE's GET /pools?poolid= shows it.
type livePool struct {
	Comment string
	Members []int
}

// pool reads one pool through the simulator's API; found is false when PVE has none of that id.
func (e *env) pool(id string) (p livePool, found bool) {
	e.t.Helper()
	req, err := http.NewRequest(http.MethodGet, e.srv.URL+"/api2/json/pools?"+url.Values{"poolid": {id}}.Encode(), nil)
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Authorization", "PVEAPIToken="+pvesim.DefaultRootTokenID+"="+pvesim.DefaultRootTokenSecret)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusOK {
		return livePool{}, false
	}
	var out struct {
		Data []struct {
			Comment string `json:"comment"`
			Members []struct {
				VMID int `json:"vmid"`
			} `json:"members"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &out); err != nil || len(out.Data) != 1 {
		e.t.Fatalf("GET /pools?poolid=%s: %s (%v)", id, body, err)
	}
	p.Comment = out.Data[0].Comment
	for _, m := range out.Data[0].Members {
		p.Members = append(p.Members, m.VMID)
	}
	slices.Sort(p.Members)
	return p, true
}

// poolRecorded reports whether the ownership inventory holds a record of a pool.
func (e *env) poolRecorded(id string) bool {
	e.t.Helper()
	key, err := bus.ObjectOwnedKey(cluster, bus.ObjectPool, id)
	if err != nil {
		e.t.Fatal(err)
	}
	_, _, err = e.bus.GetBytes(testContext(e.t), bus.BucketOwned, key)
	if errors.Is(err, bus.ErrNotFound) {
		return false
	}
	if err != nil {
		e.t.Fatal(err)
	}
	return true
}

// withPools adds Pool manifests (id → comment) to a repository and puts VMs in pools (name → pool id).
func withPools(files repoFiles, pools map[string]string, members map[string]string) repoFiles {
	out := repoFiles{}
	for k, v := range files {
		out[k] = v
	}
	var docs []string
	for _, id := range slices.Sorted(func(yield func(string) bool) {
		for id := range pools {
			if !yield(id) {
				return
			}
		}
	}) {
		docs = append(docs, fmt.Sprintf("apiVersion: proxops/v1alpha1\nkind: Pool\nmetadata: {name: %s}\nspec:\n  comment: %s\n", id, pools[id]))
	}
	if len(docs) > 0 {
		out["pool/lab/pools.yaml"] = strings.Join(docs, "---\n")
		out["clusters/lab/resources.yaml"] += "  - ../../pool/lab/pools.yaml\n"
	}
	for name, id := range members {
		f := "vm/lab/" + name + ".yaml"
		out[f] = strings.Replace(out[f], "  vmid:", "  pool: "+id+"\n  vmid:", 1)
	}
	return out
}

// A pool and a guest in it converge on the simulator in one run, marked and recorded, and the next plan is
// empty; moving the guest to another pool and dropping the first one from git moves it (allow-move), deletes
// the emptied pool and forgets its record.
func TestAPoolAndItsMemberConvergeAndAnEmptiedPoolIsPruned(t *testing.T) {
	e := newEnv(t, pvesim.DefaultSpec())
	e.startExecutors("pve1", "pve2", "pve3")
	e.startPlanner(e.plannerConfig("a"))

	files := withPools(e.vms(map[string]int{"web-01": 101, "web-02": 102}), map[string]string{"web": "Web servers"},
		map[string]string{"web-01": "web"})
	e.apply(files)
	p, found := e.pool("web")
	if !found || p.Comment != "Web servers [proxops]" || !slices.Equal(p.Members, []int{101}) {
		t.Fatalf("pool web: found %v, %+v; want comment %q and member 101", found, p, "Web servers [proxops]")
	}
	if !e.poolRecorded("web") {
		t.Fatal("pool web has no ownership record")
	}
	again := e.wait(e.announce(files, true), time.Minute)
	if len(again.planned) != 1 || !again.planned[0].Plan.Empty() {
		t.Fatalf("the converged plan is not empty: %+v", again.planned)
	}

	moved := withPools(e.vms(map[string]int{"web-01": 101, "web-02": 102}), map[string]string{"app": "Applications"},
		map[string]string{"web-01": "app"})
	o := e.apply(moved)
	var actions []plan.Action
	for _, op := range o.planned[0].Plan.Operations {
		actions = append(actions, op.Action)
	}
	if !slices.Equal(actions, []plan.Action{plan.ActionCreatePool, plan.ActionSetPoolMembers, plan.ActionDeletePool}) {
		t.Fatalf("actions %v; want create-pool, set-pool-members, delete-pool", actions)
	}
	if p, found := e.pool("app"); !found || !slices.Equal(p.Members, []int{101}) {
		t.Fatalf("pool app: found %v, %+v; want member 101", found, p)
	}
	if _, found := e.pool("web"); found {
		t.Fatal("the emptied pool web was not deleted")
	}
	if e.poolRecorded("web") || !e.poolRecorded("app") {
		t.Fatalf("records: web %v, app %v; want only app", e.poolRecorded("web"), e.poolRecorded("app"))
	}
	again = e.wait(e.announce(moved, true), time.Minute)
	if len(again.planned) != 1 || !again.planned[0].Plan.Empty() {
		t.Fatalf("the converged plan is not empty: %+v", again.planned)
	}
}
