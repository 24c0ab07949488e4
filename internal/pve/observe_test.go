package pve_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/proxops/proxops/internal/inventory"
	"github.com/proxops/proxops/internal/pve"
	"github.com/proxops/proxops/internal/pveformat"
	"github.com/proxops/proxops/internal/pvesim"
	"github.com/proxops/proxops/internal/testcorpus"
)

// corpusSpec has the storages the corpus configs reference (the qemu-server test suite's storage.cfg).
func corpusSpec() pvesim.Spec {
	s := pvesim.DefaultSpec()
	s.Nodes = []pvesim.NodeSpec{{Name: "localhost"}}
	s.Storages = append(s.Storages,
		pvesim.StorageSpec{ID: "btrfs-store", Type: "btrfs", Content: []string{"images", "rootdir"}},
		pvesim.StorageSpec{ID: "cifs-store", Type: "cifs", Content: []string{"images", "iso"}},
		pvesim.StorageSpec{ID: "krbd-store", Type: "rbd", Content: []string{"images"}},
		pvesim.StorageSpec{ID: "rbd-store", Type: "rbd", Content: []string{"images"}},
		pvesim.StorageSpec{ID: "lvm-store", Type: "lvm", Content: []string{"images"}},
		pvesim.StorageSpec{ID: "zfs-over-iscsi-store", Type: "zfs", Content: []string{"images"}},
		pvesim.StorageSpec{ID: "localsnapext", Type: "dir", Content: []string{"images"}},
		pvesim.StorageSpec{ID: "noimages", Type: "dir", Content: []string{"iso"}},
	)
	return s
}

var reSection = regexp.MustCompile(`^\[(.*)\]\s*$`)

// rawKeys lists the keys of a config file's current and pending sections as PVE reads them: '#' lines
// make the description, cdrom is ide2, each raw lxc.* key is its own key (PVE's GET config gives them as one
// "lxc" list of pairs, which the client spreads out), a pending delete names keys.
func rawKeys(raw string) []string {
	keys := map[string]bool{}
	section := ""
	for _, line := range strings.Split(raw, "\n") {
		if m := reSection.FindStringSubmatch(line); m != nil {
			section = strings.ToLower(m[1])
			continue
		}
		if section != "" && section != "pending" && section != "pve:pending" {
			continue
		}
		switch {
		case strings.HasPrefix(line, "#"):
			if section == "" {
				keys["description"] = true
			}
		default:
			k, v, ok := strings.Cut(line, ":")
			if !ok || k == "" {
				continue
			}
			if k == "cdrom" {
				k = "ide2"
			}
			if k == "delete" && section != "" {
				for d := range strings.SplitSeq(strings.TrimSpace(v), ",") {
					keys[strings.TrimPrefix(strings.TrimSpace(d), "!")] = true
				}
				continue
			}
			keys[k] = true
		}
	}
	out := make([]string, 0, len(keys))
	for k := range keys {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// Every corpus config, seeded into one simulated node, comes back from Observe with every key of its
// current and pending sections.
func TestObserveReturnsEveryRawKeyOfTheCorpusConfigs(t *testing.T) {
	spec := corpusSpec()
	want := map[int][]string{}
	names := map[int]string{}
	vmid := 1000
	for _, corpus := range testcorpus.Guests {
		kind, typ := corpus.Name, corpus.Type
		files, err := filepath.Glob(filepath.Join(testcorpus.Dir(kind), "*.conf"))
		if err != nil || len(files) == 0 {
			t.Fatalf("no corpus for %s: %v", kind, err)
		}
		for _, f := range files {
			raw, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			vmid++
			spec.Guests = append(spec.Guests, pvesim.GuestSpec{VMID: vmid, Type: typ, Node: "localhost", Config: string(raw)})
			want[vmid] = rawKeys(string(raw))
			names[vmid] = kind + "/" + filepath.Base(f)
		}
	}
	c := newSim(t, spec)
	n, err := c.client(t).Observe(testContext(t), pve.ObserveRequest{Cluster: "lab", Node: "localhost"})
	if err != nil {
		t.Fatalf("observe: %v", err)
	}
	if len(n.Guests) != len(want) {
		t.Fatalf("observed %d guests, seeded %d", len(n.Guests), len(want))
	}
	for _, g := range n.Guests {
		var got []string
		for _, e := range g.Config {
			got = append(got, e.Key)
		}
		slices.Sort(got)
		for _, k := range want[g.VMID] {
			if _, found := slices.BinarySearch(got, k); !found {
				t.Errorf("%s: key %q missing from the inventory (got %v)", names[g.VMID], k, got)
			}
		}
		if g.Digest == "" {
			t.Errorf("%s: no digest", names[g.VMID])
		}
	}
}

// A converged observe of G guests on one node costs the qemu listing, the lxc listing, the storage list, the
// cluster options (tag-style), one pending read per guest, one config read per container (its raw lxc.*
// keys), one cloud-init read per VM with a cloud-init drive, one snapshot listing per managed guest with a
// parent snapshot and one content listing per requested storage: never /status/current.
func TestObserveCostsListingsPlusOneReadPerGuestAndStorage(t *testing.T) {
	spec := baseSpec()
	spec.Storages = append(spec.Storages, pvesim.StorageSpec{ID: "isos", Type: "nfs", Content: []string{"iso"}})
	spec.Files = append(spec.Files, pvesim.FileSpec{VolID: "isos:iso/alpine.iso", Size: 1 << 20})
	const qemuGuests, lxcGuests, cloudInitVMs, withSnapshots = 7, 5, 3, 2
	for i := range qemuGuests {
		cfg := strings.ReplaceAll(seedVM, "vm-100-", fmt.Sprintf("vm-%d-", 100+i))
		if i >= qemuGuests-withSnapshots {
			cfg += "parent: proxops-1\n\n[proxops-1]\nmemory: 1024\nsnaptime: 1700000000\n"
		}
		if i < cloudInitVMs {
			cfg += fmt.Sprintf("ide2: local-lvm:vm-%d-cloudinit,media=cdrom\nciuser: admin\n", 100+i)
		}
		spec.Guests = append(spec.Guests, pvesim.GuestSpec{VMID: 100 + i, Type: "qemu", Node: "pve1",
			Config: cfg, Running: i%2 == 0})
	}
	for i := range lxcGuests {
		spec.Guests = append(spec.Guests, pvesim.GuestSpec{VMID: 200 + i, Type: "lxc", Node: "pve1",
			Config: strings.ReplaceAll(seedCT, "vm-200-", fmt.Sprintf("vm-%d-", 200+i))})
	}
	// A guest on another node is not read.
	spec.Guests = append(spec.Guests, pvesim.GuestSpec{VMID: 300, Type: "qemu", Node: "pve2", Config: "memory: 512\n"})
	c := newSim(t, spec)
	cl := c.client(t)
	c.sim.ResetLog()
	n, err := cl.Observe(testContext(t), pve.ObserveRequest{Cluster: "lab", Node: "pve1", ContentStorages: []string{"local", "isos"}})
	if err != nil {
		t.Fatalf("observe: %v", err)
	}
	if len(n.Guests) != qemuGuests+lxcGuests {
		t.Fatalf("observed %d guests", len(n.Guests))
	}
	counts := c.sim.Counts()
	want := map[string]int{
		"GET /nodes/{node}/qemu":                      1,
		"GET /nodes/{node}/lxc":                       1,
		"GET /nodes/{node}/storage":                   1,
		"GET /cluster/options":                        1,
		"GET /nodes/{node}/qemu/{vmid}/pending":       qemuGuests,
		"GET /nodes/{node}/qemu/{vmid}/cloudinit":     cloudInitVMs,
		"GET /nodes/{node}/lxc/{vmid}/pending":        lxcGuests,
		"GET /nodes/{node}/lxc/{vmid}/config":         lxcGuests,
		"GET /nodes/{node}/storage/{storage}/content": 2,
		"GET /nodes/{node}/qemu/{vmid}/snapshot":      withSnapshots,
	}
	total := 0
	for k, v := range counts {
		total += v
		if want[k] != v {
			t.Errorf("%s: %d requests, want %d", k, v, want[k])
		}
	}
	if limit := 4*1 + (qemuGuests + cloudInitVMs + withSnapshots + 2*lxcGuests) + 2; total != limit {
		t.Errorf("observe sent %d requests, want exactly 4K + G(qemu) + G(qemu with cloud-init) + G(with snapshots) + 2G(lxc) + S = %d", total, limit)
	}
	for _, g := range n.Guests {
		if want := g.Type == inventory.QEMU && g.VMID < 100+cloudInitVMs; g.CloudInitDrive != want {
			t.Errorf("vmid %d: cloud-init drive %v, want %v", g.VMID, g.CloudInitDrive, want)
		}
	}
	// The storage that holds one artifact type is asked with the content filter.
	for _, r := range c.sim.Requests() {
		if r.Template == "/nodes/{node}/storage/{storage}/content" && r.Path == "/nodes/pve1/storage/isos/content" && r.Params["content"] != "iso" {
			t.Errorf("isos listed without the iso content filter: %v", r.Params)
		}
	}
	if !n.Listed("local") || !n.Listed("isos") || n.Listed("local-lvm") {
		t.Errorf("listed storages %v", n.ListedStorages)
	}
	var vols []string
	for _, v := range n.Volumes {
		vols = append(vols, v.Volid)
	}
	wantVols := []string{"isos:iso/alpine.iso", "local:iso/debian-12.iso", "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst"}
	if !slices.Equal(vols, wantVols) {
		t.Errorf("volumes %v, want %v", vols, wantVols)
	}
	running := 0
	for _, g := range n.Guests {
		if g.Running() {
			running++
		}
	}
	if running != 4 {
		t.Errorf("%d running guests, want 4", running)
	}
}

// sshkeys leave the adapter only as the digest of their key set and cipassword as present/absent; pending
// values and pending deletes are kept apart from current values; a paused VM shows as paused.
func TestObserveRedactsSecretsAndKeepsPendingState(t *testing.T) {
	key := "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHx4yk0cS2cVb3P1oW0T2Zb9nX8t6k7s9aYb0R1d2e3f ops@example"
	spec := baseSpec()
	spec.Guests = []pvesim.GuestSpec{{VMID: 100, Type: "qemu", Node: "pve1", Running: true, Config: seedVM +
		"sshkeys: " + pveformat.EncodeSSHKeys([]string{key}) + "\ncipassword: $5$abc$hash\n\n[PENDING]\ncores: 4\ndelete: tags\n"}}
	c := newSim(t, spec)
	cl := c.client(t)
	n, err := cl.Observe(testContext(t), pve.ObserveRequest{Cluster: "lab", Node: "pve1"})
	if err != nil {
		t.Fatal(err)
	}
	g := n.Guests[0]
	if v, _ := g.Get("sshkeys"); v != inventory.SSHKeysDigest([]string{key}) {
		t.Errorf("sshkeys = %q, want the key digest", v)
	}
	if v, _ := g.Get("cipassword"); v != inventory.CIPasswordPresent {
		t.Errorf("cipassword = %q", v)
	}
	blob, _ := json.Marshal(n)
	if bytes.Contains(blob, []byte("AAAAC3NzaC1lZDI1NTE5")) || bytes.Contains(blob, []byte("$5$abc")) {
		t.Fatalf("a secret left the adapter: %s", blob)
	}
	for _, e := range g.Config {
		switch e.Key {
		case "cores":
			if e.Value != "2" || !e.HasPending || e.Pending != "4" {
				t.Errorf("cores entry %+v", e)
			}
		case "tags":
			if e.Value != "proxops" || e.Delete != 1 {
				t.Errorf("tags entry %+v", e)
			}
		}
	}
	if !slices.Equal(g.PendingKeys(), []string{"cores", "tags"}) {
		t.Errorf("pending keys %v", g.PendingKeys())
	}
	if g.Status != "running" || g.QMPStatus != "running" || g.Tags != "proxops" {
		t.Errorf("guest state %+v", g)
	}
}

// stringify rewrites a JSON answer the way PVE's serialiser may: every number as a string, plus keys a
// newer PVE might add.
func stringify(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := httptest.NewRecorder()
		next.ServeHTTP(rec, r)
		body := rec.Body.Bytes()
		var v any
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.UseNumber()
		if rec.Code == 200 && dec.Decode(&v) == nil {
			v = rewrite(v)
			body, _ = json.Marshal(v)
		}
		for k, vs := range rec.Header() {
			w.Header()[k] = vs
		}
		w.Header().Del("Content-Length")
		w.WriteHeader(rec.Code)
		_, _ = io.Copy(w, bytes.NewReader(body))
	})
}

func rewrite(v any) any {
	switch x := v.(type) {
	case json.Number:
		return x.String()
	case []any:
		for i := range x {
			x[i] = rewrite(x[i])
		}
		return x
	case map[string]any:
		for k := range x {
			x[k] = rewrite(x[k])
		}
		if _, ok := x["vmid"]; ok {
			x["x-future-field"] = map[string]any{"nested": []any{1, "two"}}
		}
		return x
	}
	return v
}

// PVE answers with numbers as strings and unknown keys: observe and apply read them all the same.
func TestAdapterToleratesNumbersAsStringsAndUnknownKeys(t *testing.T) {
	spec := baseSpec()
	spec.Guests = []pvesim.GuestSpec{{VMID: 100, Type: "qemu", Node: "pve1", Config: seedVM + "template: 1\n"},
		{VMID: 200, Type: "lxc", Node: "pve1", Config: seedCT, Running: true}}
	c := newSimHandler(t, spec, stringify)
	cl := c.client(t)
	n, err := cl.Observe(testContext(t), pve.ObserveRequest{Cluster: "lab", Node: "pve1", ContentStorages: []string{"local"}})
	if err != nil {
		t.Fatalf("observe: %v", err)
	}
	if len(n.Guests) != 2 || n.Guests[0].VMID != 100 || !n.Guests[0].Template || n.Guests[1].Status != "running" {
		t.Fatalf("guests %+v", n.Guests)
	}
	if v, _ := n.Guests[0].Get("cores"); v != "2" {
		t.Errorf("cores = %q", v)
	}
	st, ok := n.Storage("local")
	if !ok || st.Total <= 0 {
		t.Errorf("storage local %+v", st)
	}
	if len(n.Volumes) != 2 || n.Volumes[0].Size != 600<<20 {
		t.Errorf("volumes %+v", n.Volumes)
	}
}

func TestNodesListsEveryNodeOfTheCluster(t *testing.T) {
	spec := pvesim.DefaultSpec()
	spec.Nodes = []pvesim.NodeSpec{{Name: "pve3"}, {Name: "pve1"}, {Name: "pve2", Offline: true}}
	c := newSim(t, spec)
	nodes, err := c.client(t).Nodes(testContext(t))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(nodes, ","); got != "pve1,pve2,pve3" {
		t.Fatalf("nodes %s, want pve1,pve2,pve3", got)
	}
}

// Raw lxc.* keys, which GET …/pending leaves out, are observed from GET …/config as config entries in file
// order, a repeated key once per line.
func TestObserveReadsTheRawLXCKeysOfAContainer(t *testing.T) {
	spec := baseSpec()
	spec.Guests = []pvesim.GuestSpec{{VMID: 200, Type: "lxc", Node: "pve1", Config: seedCT +
		"lxc.apparmor.profile: unconfined\nlxc.cgroup2.devices.allow: c 10:200 rwm\nlxc.cgroup2.devices.allow: a\n"}}
	c := newSim(t, spec)
	n, err := c.client(t).Observe(testContext(t), pve.ObserveRequest{Cluster: "lab", Node: "pve1"})
	if err != nil {
		t.Fatal(err)
	}
	var raw []string
	for _, e := range n.Guests[0].Config {
		if strings.HasPrefix(e.Key, "lxc.") {
			raw = append(raw, e.Key+"="+e.Value)
		}
	}
	want := []string{"lxc.apparmor.profile=unconfined", "lxc.cgroup2.devices.allow=c 10:200 rwm", "lxc.cgroup2.devices.allow=a"}
	if !slices.Equal(raw, want) {
		t.Errorf("raw keys %q, want %q", raw, want)
	}
	if v, _ := n.Guests[0].Get("hostname"); v != "ct200" {
		t.Errorf("hostname = %q", v)
	}
}
