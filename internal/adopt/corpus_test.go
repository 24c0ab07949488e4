package adopt_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/proxops/proxops/internal/adopt"
	"github.com/proxops/proxops/internal/inventory"
	"github.com/proxops/proxops/internal/plan"
	"github.com/proxops/proxops/internal/pvesim"
	"github.com/proxops/proxops/internal/pvewire"
	"github.com/proxops/proxops/internal/render"
	"github.com/proxops/proxops/internal/testcorpus"
)

// roundTripFloor is how many corpus configs must adopt into a manifest that plans to nothing but the claim
// of the ownership tag. Raise it when adoption covers more; never lower it to make a change pass. (Two
// containers locked by a backup count as exceptions: a locked guest is not adopted.)
const roundTripFloor = 138

// corpusGuest is one corpus config seeded into the simulated cluster.
type corpusGuest struct {
	file string // <corpus>/<name>.conf
	vmid int
	typ  string
	node string
}

var corpusNodes = []string{"pve1", "pve2"}

// corpusStorages are the storages the corpus configs reference (the test suites' storage.cfg), on every
// node.
func corpusStorages() []pvesim.StorageSpec {
	return []pvesim.StorageSpec{
		{ID: "local", Type: "dir", Content: []string{"images", "rootdir", "iso", "vztmpl", "import", "snippets"}},
		{ID: "local-lvm", Type: "lvmthin", Content: []string{"images", "rootdir"}},
		{ID: "btrfs-store", Type: "btrfs", Content: []string{"images", "rootdir"}},
		{ID: "cifs-store", Type: "cifs", Content: []string{"images", "iso"}},
		{ID: "krbd-store", Type: "rbd", Content: []string{"images"}},
		{ID: "rbd-store", Type: "rbd", Content: []string{"images"}},
		{ID: "lvm-store", Type: "lvm", Content: []string{"images"}},
		{ID: "zfs-over-iscsi-store", Type: "zfs", Content: []string{"images"}},
		{ID: "localsnapext", Type: "dir", Content: []string{"images"}},
		{ID: "noimages", Type: "dir", Content: []string{"iso"}},
	}
}

// volumeRE finds the volumes of a config (storage:volname up to the next comma or line end).
var volumeRE = regexp.MustCompile(`(?m)^(?:scsi|virtio|sata|ide|efidisk|tpmstate|mp)\d+: ([a-z][a-z0-9-]*:[^,\s]+)(.*)$|^rootfs: ([a-z][a-z0-9-]*:[^,\s]+)(.*)$`)

// listable are the volume names a storage listing shows (as pve-storage parses them).
var listable = regexp.MustCompile(`^(\d+/)?(base|vm|subvol)-\d+-[^/]+$|^iso/[^/]+\.(iso|img)$`)

// corpusFiles are the storage files the configs need listed: every volume without a size= token (its size
// comes from the listing) and every ISO a CD drive holds. Volume names the simulator cannot parse are left
// out: their guests cannot be sized and must come out INCOMPLETE.
func corpusFiles(configs []string) []pvesim.FileSpec {
	seen := map[string]bool{}
	var out []pvesim.FileSpec
	for _, raw := range configs {
		current, _, _ := strings.Cut(raw, "\n[")
		for _, m := range volumeRE.FindAllStringSubmatch(current, -1) {
			vol, rest := m[1], m[2]
			if vol == "" {
				vol, rest = m[3], m[4]
			}
			iso := strings.Contains(vol, ":iso/")
			storage, volname, _ := strings.Cut(vol, ":")
			if !slices.ContainsFunc(corpusStorages(), func(s pvesim.StorageSpec) bool { return s.ID == storage }) ||
				!listable.MatchString(volname) {
				continue
			}
			if seen[vol] || (strings.Contains(rest, "size=") && !iso) || strings.HasSuffix(vol, "cloudinit") {
				continue
			}
			seen[vol] = true
			size := int64(1) << 30
			switch {
			case iso:
				size = 112 << 20
			case strings.Contains(m[0], "efidisk"):
				size = 528 << 10
			case strings.Contains(m[0], "tpmstate"):
				size = 4 << 20
			}
			out = append(out, pvesim.FileSpec{VolID: vol, Size: size})
		}
	}
	return out
}

// writesOnlyNameAndTag reports an update that writes nothing but the name (or hostname) of a guest that
// has none, and the ownership tag.
func writesOnlyNameAndTag(op plan.Operation) bool {
	name := false
	for _, c := range op.Changes {
		switch {
		case c.Field == "tags":
		case (c.Field == "name" || c.Field == "hostname") && c.Before == "":
			name = true
		default:
			return false
		}
	}
	return name
}

// seedCorpus builds the simulated cluster holding every corpus config, each on its own vmid, spread over
// two nodes; every third guest runs.
func seedCorpus(t *testing.T) (*lab, []corpusGuest) {
	t.Helper()
	spec := pvesim.DefaultSpec()
	spec.Nodes = []pvesim.NodeSpec{{Name: corpusNodes[0]}, {Name: corpusNodes[1]}}
	spec.Storages = corpusStorages()
	var guests []corpusGuest
	var configs []string
	for c, corpus := range testcorpus.Guests {
		kind, typ := corpus.Name, corpus.Type
		files, err := filepath.Glob(filepath.Join(testcorpus.Dir(kind), "*.conf"))
		if err != nil || len(files) == 0 {
			t.Fatalf("no corpus in %s: %v", kind, err)
		}
		slices.Sort(files)
		base := 1000 * (c + 1)
		for i, f := range files {
			raw, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			g := corpusGuest{file: kind + "/" + filepath.Base(f), vmid: base + i, typ: typ, node: corpusNodes[i%2]}
			guests = append(guests, g)
			configs = append(configs, string(raw))
			spec.Guests = append(spec.Guests, pvesim.GuestSpec{VMID: g.vmid, Type: typ, Node: g.node, Config: string(raw),
				Running: i%3 == 1})
		}
	}
	spec.Files = corpusFiles(configs)
	l := newLab(t, spec)
	if w := l.sim.Warnings(); len(w) > 0 {
		t.Fatalf("the corpus loads with parser warnings: %q", w)
	}
	return l, guests
}

// Every corpus config is adopted, the complete manifests are written into a repository and planned with the
// real planner core against the same cluster: the only operations are claims of the ownership tag, one per
// adopted guest; every other config comes out INCOMPLETE or refused with its reason, as the outcomes
// golden records; every key the model does not cover is reported as a gap; and nothing was written to PVE.
func TestCorpusAdoptsAndPlansToNothingButTheClaim(t *testing.T) {
	l, guests := seedCorpus(t)
	observed := l.observe(t, "corpus", corpusNodes...)
	res, err := adopt.Adopt(adopt.Input{Cluster: "corpus", Observed: observed})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	writeRepository(t, dir, "corpus", corpusNodes, res)
	p := planRepository(t, dir, "corpus", observed, nil)

	byVMID := map[int]adopt.Manifest{}
	for _, m := range res.Manifests {
		if m.VMID != 0 {
			byVMID[m.VMID] = m
		}
	}
	skipped := map[int]adopt.Skipped{}
	for _, s := range res.Skipped {
		if s.VMID != 0 {
			skipped[s.VMID] = s
		}
	}
	claims, named, regenerated := map[int]bool{}, map[int]string{}, map[int]bool{}
	for _, op := range p.Operations {
		if op.Action == plan.ActionClaimTag {
			claims[op.VMID] = true
			continue
		}
		// The regeneration of a stale cloud-init drive, which the plan shows as such.
		if op.Action == plan.ActionRegenerateCloudInit {
			regenerated[op.VMID] = true
			continue
		}
		// The one other write adoption plans: the name of a guest that has none, with the claim.
		if op.Action == plan.ActionConfigure && writesOnlyNameAndTag(op) {
			claims[op.VMID] = true
			for _, c := range op.Changes {
				if c.Field != "tags" {
					named[op.VMID] = c.After
				}
			}
			continue
		}
		t.Errorf("operation %s (%s): %s %+v", op.ID, op.Action, op.Reason, op.Changes)
	}
	var lines []string
	roundTrips := 0
	for _, g := range guests {
		var outcome string
		m, adopted := byVMID[g.vmid]
		switch s, ok := skipped[g.vmid]; {
		case ok && s.Refused:
			outcome = "refused: " + strings.TrimPrefix(s.Reason, "PVE refuses this config: ")
		case ok:
			outcome = "skipped: " + s.Reason
		case !adopted:
			t.Errorf("%s (vmid %d) was neither adopted nor skipped", g.file, g.vmid)
			continue
		case !m.Complete():
			outcome = "INCOMPLETE: " + strings.Join(m.Incomplete, "; ")
			if claims[g.vmid] {
				t.Errorf("%s: INCOMPLETE but planned", g.file)
			}
		default:
			outcome = "round-trips"
			if n := named[g.vmid]; n != "" {
				outcome += " (the first apply writes the name " + n + ")"
			}
			if regenerated[g.vmid] {
				outcome += " (the first apply regenerates its stale cloud-init drive)"
			}
			roundTrips++
			if !claims[g.vmid] {
				t.Errorf("%s (vmid %d): adopted without a claim of the ownership tag", g.file, g.vmid)
			}
		}
		var keys []string
		for _, gap := range res.Gaps {
			if gap.VMID == g.vmid && !slices.Contains(keys, gap.Key) {
				keys = append(keys, gap.Key)
			}
		}
		line := g.file + ": " + outcome
		if len(keys) > 0 {
			line += "\n    gaps: " + strings.Join(keys, ", ")
		}
		lines = append(lines, line)
	}
	// The report's count of outcomes agrees with the list.
	g := render.NewAdoptionJSON(render.Adoption{Result: res}).Guests
	lines = append(lines, fmt.Sprintf("guests: %d complete, %d incomplete, %d refused", g.Complete, g.Incomplete, g.Refused))
	if g.Complete != roundTrips || g.Complete+g.Incomplete+g.Refused != len(guests) {
		t.Errorf("the report counts %+v, the outcomes %d round trips of %d guests", g, roundTrips, len(guests))
	}
	checkGolden(t, filepath.Join("testdata", "corpus-outcomes.txt"), []byte(strings.Join(lines, "\n")+"\n"))
	if roundTrips < roundTripFloor {
		t.Errorf("%d corpus configs round-trip, below the floor of %d", roundTrips, roundTripFloor)
	}
	t.Logf("%d of %d corpus configs round-trip", roundTrips, len(guests))

	// Every key the model does not cover is a gap of its guest.
	for _, n := range observed.Nodes {
		for _, g := range n.Guests {
			for _, e := range g.Config {
				if !e.HasValue || pvewire.IsModelled(g.Type, e.Key) || pvewire.IsBookkeeping(g.Type, e.Key) {
					continue
				}
				if !slices.ContainsFunc(res.Gaps, func(x inventory.Gap) bool { return x.VMID == g.VMID && x.Key == e.Key }) {
					t.Errorf("vmid %d: key %s=%s is not reported as a gap", g.VMID, e.Key, e.Value)
				}
			}
		}
	}
	if w := l.writes(); len(w) > 0 {
		t.Errorf("adoption wrote to PVE: %v", w)
	}
	if testing.Verbose() {
		for _, m := range res.Manifests {
			fmt.Printf("--- %s\n%s", m.Path, m.Content)
		}
	}
}
