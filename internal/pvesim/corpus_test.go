package pvesim_test

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/proxops/proxops/internal/pvesim"
	"github.com/proxops/proxops/internal/testcorpus"
)

var update = flag.Bool("update", false, "rewrite golden files")

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

var reExpectError = regexp.MustCompile(`(?m)^# EXPECT_ERROR: (.*)$`)

// notModelled are EXPECT_ERROR fixtures whose error depends on an installed QEMU older than the
// simulated node's, which the simulator does not vary.
var notModelled = map[string]bool{"old-qemu.conf": true}

// Every corpus config loads without a parser warning and reads back through GET config with the keys of
// its current section; the values (drives normalised as PVE prints them) are pinned by golden files.
// Fixtures marked EXPECT_ERROR load as PVE loads them and fail at start with PVE's message.
func TestCorpusConfigsRoundTrip(t *testing.T) {
	for _, corpus := range testcorpus.Guests {
		kind := corpus.Name
		dir := testcorpus.Dir(kind)
		files, err := filepath.Glob(filepath.Join(dir, "*.conf"))
		if err != nil || len(files) == 0 {
			t.Fatalf("no corpus in %s: %v", dir, err)
		}
		for _, file := range files {
			name := filepath.Base(file)
			t.Run(kind+"/"+name, func(t *testing.T) {
				raw, err := os.ReadFile(file)
				if err != nil {
					t.Fatal(err)
				}
				typ, path := corpus.Type, corpus.Type
				spec := corpusSpec()
				spec.Guests = []pvesim.GuestSpec{{VMID: 8006, Type: typ, Node: "localhost", Config: string(raw)}}
				c := newCluster(t, spec)
				if w := c.sim.Warnings(); len(w) > 0 {
					t.Fatalf("parser warnings: %q", w)
				}
				r := c.do("GET", fmt.Sprintf("/nodes/localhost/%s/8006/config", path), nil)
				if r.Status != 200 {
					t.Fatalf("get config: %d %s", r.Status, r.Message)
				}
				got := r.obj(t)
				want := currentKeys(string(raw))
				var gotKeys []string
				for k := range got {
					if k != "digest" {
						gotKeys = append(gotKeys, k)
					}
				}
				sort.Strings(gotKeys)
				if strings.Join(gotKeys, ",") != strings.Join(want, ",") {
					t.Fatalf("keys %v, want %v", gotKeys, want)
				}
				var lines []string
				for _, k := range gotKeys {
					v, _ := json.Marshal(got[k])
					lines = append(lines, k+": "+string(v))
				}
				checkGolden(t, filepath.Join("testdata", "golden", kind, name+".txt"), strings.Join(lines, "\n")+"\n")

				if m := reExpectError.FindStringSubmatch(string(raw)); m != nil && typ == "qemu" && !notModelled[name] {
					r := c.do("POST", "/nodes/localhost/qemu/8006/status/start", nil)
					if r.Status != 200 {
						t.Fatalf("start: %d %s", r.Status, r.Message)
					}
					want := m[1]
					if name == "minimal-defaults-to-new-machine.conf" {
						// The fixture pins QEMU 9.0.0; the simulated node runs a newer QEMU.
						want = "is too old to run machine type 'pc-q35-42.9+pve0', please upgrade node 'localhost'"
					}
					if st := c.waitTask(r.str(t)); !strings.Contains(st, want) {
						t.Fatalf("start ended %q, want %q", st, want)
					}
				}
			})
		}
	}
}

// currentKeys lists the keys of a config file's current section the way PVE reads them: '#' lines make
// the description, 'cdrom' is ide2, lxc.* keys are returned together as "lxc".
func currentKeys(raw string) []string {
	keys := map[string]bool{}
	for _, line := range strings.Split(raw, "\n") {
		if strings.HasPrefix(line, "[") {
			break
		}
		switch {
		case strings.HasPrefix(line, "#"):
			keys["description"] = true
		case strings.HasPrefix(line, "lxc."):
			keys["lxc"] = true
		default:
			if i := strings.Index(line, ":"); i > 0 {
				k := line[:i]
				if k == "cdrom" {
					k = "ide2"
				}
				keys[k] = true
			}
		}
	}
	var out []string
	for k := range keys {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func checkGolden(t *testing.T, path, got string) {
	t.Helper()
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read golden (run go test -update): %v", err)
	}
	if string(want) != got {
		t.Fatalf("%s differs:\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}
