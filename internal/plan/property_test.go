package plan_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/proxops/proxops/internal/inventory"
	"github.com/proxops/proxops/internal/plan"
	"github.com/proxops/proxops/internal/pve"
	"github.com/proxops/proxops/internal/pvesim"
	"github.com/proxops/proxops/internal/render"
	"github.com/proxops/proxops/internal/repo"
	"github.com/proxops/proxops/internal/testcorpus"
)

// The property tests generate random (seeded) desired and observed states, apply the plan to the simulator
// through the real PVE adapter, and check what must hold for every input.

var simNodes = []string{"pve1", "pve2"}

// world is one generated case: a repository, the simulator's initial guests and the ownership records.
type world struct {
	files map[string]string
	spec  pvesim.Spec
	// owned lists the vmids that get an ownership record matching their live identity after the first
	// observe; forged the vmids that get a record with another fingerprint.
	owned  []int
	forged []int
	keys   map[string]string
}

type gen struct {
	r *rand.Rand
	w *world
}

func (g *gen) chance(p float64) bool { return g.r.Float64() < p }

func pick[T any](g *gen, xs ...T) T { return xs[g.r.IntN(len(xs))] }

const (
	isoURL = "https://mirror.example.invalid/isos/rescue.iso"
	cttURL = "https://mirror.example.invalid/ct/debian-13-standard_13.1-2_amd64.tar.zst"
	keyA   = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIMqXgRLKG73K+sIxs5oj3E2nhu/4FHxOcrmAd4Wv7ki7 a@example.com"
	keyB   = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAID4j6BYAOVlKM4lPZWThsTSLvXoAiNQsSstz7q7VnACd b@example.com"
)

func (g *gen) file(path, content string) { g.w.files[path] = content }

func (g *gen) guest(vmid int, typ, node string, running bool, lines []string, pending []string) {
	cfg := strings.Join(lines, "\n") + "\n"
	if len(pending) > 0 {
		sect := "[PENDING]"
		if typ == "lxc" {
			sect = "[pve:pending]"
		}
		cfg += "\n" + sect + "\n" + strings.Join(pending, "\n") + "\n"
	}
	g.w.spec.Guests = append(g.w.spec.Guests, pvesim.GuestSpec{VMID: vmid, Type: typ, Node: node, Running: running, Config: cfg})
}

// liveTags is the tags line of a live guest: the ownership tag (with or without operators' tags), the
// predecessor's tag, or none.
func (g *gen) liveTags(declared []string) (string, bool) {
	switch g.r.IntN(6) {
	case 0:
		return "", false
	case 1:
		return "tags: pveconform", false
	case 2:
		return "tags: " + strings.Join(append([]string{"proxops", "ops-owned"}, declared...), ";"), true
	}
	return "tags: " + strings.Join(append([]string{"proxops"}, declared...), ";"), true
}

func generate(seed uint64) *world {
	g := &gen{r: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), w: &world{files: map[string]string{}, keys: map[string]string{"main": keyA, "ci": keyB}}}
	spec := pvesim.DefaultSpec()
	spec.TaskDurations = map[string]pvesim.Duration{"default": 0}
	spec.Seed = int64(seed) + 1
	g.w.spec = spec
	var listed []string
	add := func(path string) { listed = append(listed, "  - ../../"+path) }

	g.file("iso/base/rescue.yaml", "apiVersion: proxops/v1alpha1\nkind: ISO\nmetadata: {name: rescue}\nspec:\n  nodes: [pve1, pve2]\n  storage: local\n  filename: rescue.iso\n  url: "+isoURL+"\n")
	add("iso/base/rescue.yaml")
	g.file("ctt/base/golden.yaml", "apiVersion: proxops/v1alpha1\nkind: CTTemplate\nmetadata: {name: golden}\nspec:\n  nodes: [pve1, pve2]\n  storage: local\n  filename: debian-13-standard_13.1-2_amd64.tar.zst\n  url: "+cttURL+"\n")
	add("ctt/base/golden.yaml")
	for _, n := range simNodes {
		if g.chance(0.5) {
			g.w.spec.Files = append(g.w.spec.Files, pvesim.FileSpec{VolID: "local:iso/rescue.iso", Node: n, Size: 1 << 20})
		}
	}

	for i := range 2 + g.r.IntN(5) {
		vmid := 100 + i
		path := fmt.Sprintf("vm/base/vm-%d.yaml", i)
		g.file(path, g.vm(vmid, fmt.Sprintf("vm-%d", i)))
		add(path)
	}
	for i := range g.r.IntN(4) {
		vmid := 200 + i
		path := fmt.Sprintf("lxc/base/ct-%d.yaml", i)
		g.file(path, g.ct(vmid, fmt.Sprintf("ct-%d", i)))
		add(path)
	}
	if g.chance(0.6) {
		g.file("templatevm/base/tpl.yaml", g.template())
		add("templatevm/base/tpl.yaml")
		if g.chance(0.7) {
			g.file("vm/base/clone.yaml", g.clone())
			add("vm/base/clone.yaml")
		}
	}
	// Undeclared guests: owned ones (pruned), hand-made clones, foreign and legacy-tagged ones (never).
	for i := range g.r.IntN(6) {
		vmid := 300 + i
		node := pick(g, simNodes...)
		tags := pick(g, "tags: proxops", "tags: proxops;old", "", "tags: pveconform", "tags: web")
		lines := []string{"cores: 1", "memory: 512", "name: stale-" + strconv.Itoa(i),
			fmt.Sprintf("smbios1: uuid=5e1f0000-0000-4000-8000-%012d", vmid)}
		if tags != "" {
			lines = append(lines, tags)
		}
		if g.chance(0.3) {
			lines = append(lines, "protection: 1")
		}
		g.guest(vmid, "qemu", node, g.chance(0.5), lines, nil)
		switch {
		case g.chance(0.6):
			g.w.owned = append(g.w.owned, vmid)
		case g.chance(0.5):
			g.w.forged = append(g.w.forged, vmid)
		}
	}
	for i := range g.r.IntN(3) {
		vmid := 400 + i
		tags := pick(g, "tags: proxops", "")
		lines := []string{"arch: amd64", "cores: 1", "hostname: stale-ct-" + strconv.Itoa(i), "memory: 512",
			fmt.Sprintf("net0: name=eth0,bridge=vmbr0,hwaddr=BC:24:11:04:00:%02X,type=veth", i),
			"ostype: debian", fmt.Sprintf("rootfs: local-lvm:vm-%d-disk-0,size=1G", vmid), "unprivileged: 1"}
		if tags != "" {
			lines = append(lines, tags)
		}
		g.guest(vmid, "lxc", pick(g, simNodes...), g.chance(0.5), lines, nil)
		if g.chance(0.7) {
			g.w.owned = append(g.w.owned, vmid)
		}
	}
	budget := pick(g, "0", "0", "2")
	g.file("clusters/lab/config.yaml", "pve:\n  clusters:\n    lab:\n      base-url: https://pve.example.invalid:8006\n      nodes: [pve1, pve2]\n      prune-budget: "+budget+"\n")
	slices.Sort(listed)
	g.file("clusters/lab/resources.yaml", "resources:\n"+strings.Join(listed, "\n")+"\n")
	restart := pick(g, "auto", "auto", "never")
	g.file("proxops.yaml", "reconcile:\n  restart: "+restart+"\n  shutdown-timeout: 5s\n")
	return g.w
}

// vm writes a VM manifest and, most of the time, a live guest near it.
func (g *gen) vm(vmid int, name string) string {
	node := pick(g, simNodes...)
	state := pick(g, "started", "started", "stopped")
	mem := pick(g, 512, 1024, 2048)
	cores := 1 + g.r.IntN(3)
	cpu := pick(g, "host", "x86-64-v2-AES")
	disk := pick(g, 2, 4)
	var tags []string
	if g.chance(0.4) {
		tags = []string{"web", pick(g, "prod", "dev")}
	}
	bridge := pick(g, "vmbr0", "vmbr1")
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: proxops/v1alpha1\nkind: VM\nmetadata: {name: %s}\nspec:\n  node: %s\n  vmid: %d\n  state: %s\n", name, node, vmid, state)
	fmt.Fprintf(&b, "  memory: %dMiB\n  cpu: {type: %s, cores: %d}\n", mem, cpu, cores)
	if len(tags) > 0 {
		fmt.Fprintf(&b, "  tags: [%s]\n", strings.Join(tags, ", "))
	}
	desc := ""
	if g.chance(0.3) {
		desc = "managed " + name
		fmt.Fprintf(&b, "  pve-description: %q\n", desc)
	}
	iothread := g.chance(0.4)
	fmt.Fprintf(&b, "  disks:\n    - {storage: local-lvm, size: %dGiB, controller: virtio-scsi-single, iothread: %t}\n", disk, iothread)
	second := g.chance(0.3)
	if second {
		b.WriteString("    - {storage: local-lvm, size: 1GiB, discard: \"on\"}\n")
	}
	vlan := pick(g, -1, 0, 10)
	fmt.Fprintf(&b, "  networks:\n    - {bridge: %s", bridge)
	if vlan >= 0 {
		fmt.Fprintf(&b, ", vlan: %d", vlan)
	}
	b.WriteString("}\n")
	cdrom := g.chance(0.4)
	ci := g.chance(0.4)
	if cdrom || ci {
		b.WriteString("  hardware:\n")
		if ci {
			b.WriteString("    cloud-init: {enabled: true, storage: local-lvm}\n")
		}
		if cdrom {
			b.WriteString("    cdrom: {iso: " + pick(g, "rescue", "none") + "}\n")
		}
	}
	onboot := g.chance(0.5)
	agent := g.chance(0.5)
	if g.chance(0.6) {
		fmt.Fprintf(&b, "  options: {onboot: %t, agent: %t, boot-order: [scsi0, net0]}\n", onboot, agent)
	}
	if ci {
		b.WriteString("  cloud-init-data:\n    ci-user: admin\n")
		if g.chance(0.5) {
			b.WriteString("    ssh-key-refs: [cloud-init.ssh-keys.main]\n")
		} else {
			fmt.Fprintf(&b, "    ssh-keys: [%q]\n", keyB)
		}
		b.WriteString("    nameservers: [192.0.2.53, 192.0.2.54]\n")
		fmt.Fprintf(&b, "    ipconfigs:\n      - {nic: 0, ip: 192.0.2.%d/24, gateway: 192.0.2.1}\n", vmid%200)
	}
	if g.chance(0.35) {
		return b.String() // not on PVE yet
	}
	// A live guest near the manifest, with random drift.
	drift := func(p float64) bool { return g.chance(p) }
	live := []string{fmt.Sprintf("smbios1: uuid=0b1e0000-0000-4000-8000-%012d", vmid), "scsihw: virtio-scsi-single"}
	lname := name
	if drift(0.1) {
		lname = "someone-else"
	}
	live = append(live, "name: "+lname)
	if t, ok := g.liveTags(tags); ok || t != "" {
		live = append(live, t)
	}
	liveMem := mem
	if drift(0.3) {
		liveMem = pick(g, 512, 1024, 4096)
	}
	live = append(live, fmt.Sprintf("memory: %d", liveMem))
	liveCores := cores
	if drift(0.2) {
		liveCores = 4
	}
	live = append(live, fmt.Sprintf("cores: %d", liveCores), "cpu: "+cpu)
	liveDisk := disk
	if drift(0.3) {
		liveDisk = pick(g, 1, 2, 4, 8)
	}
	opt := ""
	if iothread && !drift(0.3) {
		opt = ",iothread=1"
	}
	live = append(live, fmt.Sprintf("scsi0: local-lvm:vm-%d-disk-0%s,size=%dG", vmid, opt, liveDisk))
	if second && !drift(0.3) {
		live = append(live, fmt.Sprintf("scsi1: local-lvm:vm-%d-disk-1,discard=on,size=1G", vmid))
	}
	nic := fmt.Sprintf("net0: virtio=BC:24:11:01:%02X:00,bridge=%s", vmid%256, bridge)
	if drift(0.2) {
		nic = fmt.Sprintf("net0: virtio=BC:24:11:01:%02X:00,bridge=vmbr0,firewall=1,tag=20", vmid%256)
	} else if vlan > 0 {
		nic += ",tag=10"
	}
	live = append(live, nic)
	if desc != "" && !drift(0.3) {
		live = append(live, "description: "+desc)
	}
	if ci && !drift(0.3) {
		live = append(live, fmt.Sprintf("ide2: local-lvm:vm-%d-cloudinit,media=cdrom", vmid), "ciuser: admin")
	}
	if drift(0.2) {
		live = append(live, "onboot: 1", "agent: 1")
	}
	var pending []string
	running := state == "started"
	if drift(0.25) {
		running = !running
	}
	if running && drift(0.2) {
		pending = append(pending, fmt.Sprintf("memory: %d", mem))
	}
	g.guest(vmid, "qemu", node, running, live, pending)
	return b.String()
}

func (g *gen) ct(vmid int, name string) string {
	node := pick(g, simNodes...)
	state := pick(g, "started", "stopped")
	mem := pick(g, 256, 512)
	root := pick(g, 1, 2)
	nesting := g.chance(0.5)
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: proxops/v1alpha1\nkind: LXC\nmetadata: {name: %s}\nspec:\n  node: %s\n  vmid: %d\n  state: %s\n  template: golden\n", name, node, vmid, state)
	fmt.Fprintf(&b, "  memory: %dMiB\n  swap: 256MiB\n  cpu: {cores: 1}\n  root: {storage: local-lvm, size: %dGiB}\n", mem, root)
	hasMP := g.chance(0.4)
	if hasMP {
		b.WriteString("  mount-points:\n    - {storage: local-lvm, size: 1GiB, mount-point: /data}\n")
	}
	b.WriteString("  networks:\n    - {bridge: vmbr0, ip: 192.0.2.30/24, gw: 192.0.2.1}\n")
	b.WriteString("  dns: {nameservers: [192.0.2.53], domain: example.com}\n")
	fmt.Fprintf(&b, "  options: {unprivileged: true, nesting: %t, onboot: %t}\n", nesting, g.chance(0.5))
	if g.chance(0.35) {
		return b.String()
	}
	live := []string{"arch: amd64", "cores: 1", "hostname: " + name, "ostype: debian", "unprivileged: 1",
		fmt.Sprintf("memory: %d", pick(g, mem, mem, 1024)), "swap: 256",
		fmt.Sprintf("rootfs: local-lvm:vm-%d-disk-0,size=%dG", vmid, pick(g, root, root, 1)),
		fmt.Sprintf("net0: name=net0,bridge=vmbr0,gw=192.0.2.1,hwaddr=BC:24:11:02:%02X:00,ip=192.0.2.30/24,type=veth", vmid%256)}
	if t, ok := g.liveTags(nil); ok || t != "" {
		live = append(live, t)
	}
	if nesting && g.chance(0.7) {
		live = append(live, "features: nesting=1")
	}
	if g.chance(0.5) {
		live = append(live, "nameserver: 192.0.2.53", "searchdomain: example.com")
	}
	if hasMP && g.chance(0.6) {
		live = append(live, fmt.Sprintf("mp0: local-lvm:vm-%d-disk-1,mp=/data,size=1G", vmid))
	}
	running := state == "started"
	if g.chance(0.25) {
		running = !running
	}
	g.guest(vmid, "lxc", node, running, live, nil)
	return b.String()
}

func (g *gen) template() string {
	s := "apiVersion: proxops/v1alpha1\nkind: TemplateVM\nmetadata: {name: tpl}\nspec:\n  node: pve1\n  vmid: 900\n" +
		"  memory: 1GiB\n  cpu: {type: host, cores: 1}\n  disks:\n    - {storage: local-lvm, size: 2GiB}\n" +
		"  networks:\n    - {bridge: vmbr0}\n  hardware:\n    cloud-init: {enabled: true, storage: local-lvm}\n" +
		"  cloud-init-data:\n    ci-user: template\n    nameservers: [192.0.2.1]\n"
	switch g.r.IntN(3) {
	case 0: // not on PVE yet
	case 1:
		g.guest(900, "qemu", "pve1", false, []string{"cores: 1", "cpu: host", "memory: 1024", "name: tpl",
			"net0: virtio=BC:24:11:09:00:00,bridge=vmbr0", "scsi0: local-lvm:base-900-disk-0,size=2G",
			"ide2: local-lvm:vm-900-cloudinit,media=cdrom", "ciuser: template", "nameserver: 192.0.2.1",
			"smbios1: uuid=7e000000-0000-4000-8000-000000000900", "tags: proxops", "template: 1"}, nil)
	default: // a tagged guest that should become the template
		g.guest(900, "qemu", "pve1", g.chance(0.5), []string{"cores: 1", "cpu: host", "memory: 1024", "name: tpl",
			"net0: virtio=BC:24:11:09:00:00,bridge=vmbr0", "scsi0: local-lvm:vm-900-disk-0,size=2G",
			"ide2: local-lvm:vm-900-cloudinit,media=cdrom", "ciuser: template", "nameserver: 192.0.2.1",
			"smbios1: uuid=7e000000-0000-4000-8000-000000000900", "tags: proxops"}, nil)
		g.w.owned = append(g.w.owned, 900)
	}
	return s
}

func (g *gen) clone() string {
	return "apiVersion: proxops/v1alpha1\nkind: VM\nmetadata: {name: clone}\nspec:\n  node: pve1\n  vmid: 901\n  clone: tpl\n" +
		"  memory: 2GiB\n  cpu: {type: host, cores: 2}\n  networks:\n    - {bridge: vmbr0}\n" +
		"  hardware:\n    cloud-init: {enabled: true, storage: local-lvm}\n" +
		"  cloud-init-data:\n    ipconfigs:\n      - {nic: 0, ip: 192.0.2.91/24, gateway: 192.0.2.1}\n"
}

// secrets serves the generated keys to the planner (digests) and to the adapter (values).
type secrets struct{ keys map[string]string }

func (s secrets) SSHKeysDigest(refs []string) (string, error) {
	var keys []string
	for _, r := range refs {
		k, ok := s.keys[strings.TrimPrefix(r, "cloud-init.ssh-keys.")]
		if !ok {
			return "", fmt.Errorf("%s does not resolve", r)
		}
		keys = append(keys, k)
	}
	return inventory.SSHKeysDigest(keys), nil
}

func (s secrets) CheckPassword(ref string) error {
	if _, ok := s.keys[strings.TrimPrefix(ref, "cloud-init.passwords.")]; !ok {
		return fmt.Errorf("%s does not resolve", ref)
	}
	return nil
}

func (s secrets) Resolve(_ context.Context, ref string) (string, error) {
	name := strings.TrimPrefix(strings.TrimPrefix(ref, "cloud-init.ssh-keys."), "cloud-init.passwords.")
	k, ok := s.keys[name]
	if !ok {
		return "", fmt.Errorf("%s does not resolve", ref)
	}
	return k, nil
}

// harness runs a world against a simulator.
type harness struct {
	t       *testing.T
	ctx     context.Context
	sim     *pvesim.Sim
	cl      *pve.Client
	rp      *repo.Repository
	w       *world
	owned   map[int]plan.Owned
	cluster string
	nodes   []string
}

func newHarness(t *testing.T, w *world) *harness {
	t.Helper()
	sim, err := pvesim.New(w.spec)
	if err != nil {
		t.Fatalf("simulator: %v", err)
	}
	srv := httptest.NewServer(sim)
	t.Cleanup(func() { srv.Close(); sim.WaitTasks() })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	cl, err := pve.New(ctx, pve.Config{BaseURL: srv.URL, TokenID: pvesim.DefaultRootTokenID, TokenSecret: pvesim.DefaultRootTokenSecret,
		TaskPollMin: time.Millisecond, TaskPollMax: 5 * time.Millisecond, ReadBackoff: time.Millisecond, TaskTimeout: 30 * time.Second},
		slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("adapter: %v", err)
	}
	fsys := fstest.MapFS{}
	for p, c := range w.files {
		fsys[p] = &fstest.MapFile{Data: []byte(c)}
	}
	rp := repo.Load(fsys)
	if ds := rp.ClusterDiagnostics("lab"); ds.HasErrors() {
		t.Fatalf("generated repository is invalid:\n%v", ds)
	}
	return &harness{t: t, ctx: ctx, sim: sim, cl: cl, rp: rp, w: w, owned: map[int]plan.Owned{}, cluster: "lab", nodes: simNodes}
}

func (h *harness) observe() inventory.Cluster {
	h.t.Helper()
	c := inventory.Cluster{Name: h.cluster}
	for _, n := range h.nodes {
		node, err := h.cl.Observe(h.ctx, pve.ObserveRequest{Cluster: h.cluster, Node: n, ContentStorages: plan.ContentStorages(h.rp.Cluster(h.cluster))[n]})
		if err != nil {
			h.t.Fatalf("observe %s: %v", n, err)
		}
		c.Nodes = append(c.Nodes, node)
	}
	return c
}

func (h *harness) input(obs inventory.Cluster) plan.Input {
	cl := h.rp.Cluster(h.cluster)
	in := plan.Input{Cluster: cl, Observed: obs, Secrets: secrets{h.w.keys}, Settings: plan.SettingsFor(h.rp.Config, cl.Config), Tree: "property"}
	for _, vmid := range sortedVMIDs(h.owned) {
		in.Owned = append(in.Owned, h.owned[vmid])
	}
	return in
}

func sortedVMIDs(m map[int]plan.Owned) []int {
	var out []int
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func (h *harness) diff(obs inventory.Cluster) plan.Plan {
	h.t.Helper()
	p, err := plan.Diff(h.input(obs))
	if err != nil {
		h.t.Fatalf("diff: %v", err)
	}
	if _, err := plan.NewRun(p); err != nil {
		h.t.Fatalf("the plan cannot run: %v\n%s", err, render.PlanText(p))
	}
	return p
}

// apply runs a plan's operations in dispatch order through the adapter (the plan is confirmed when held)
// and keeps the ownership inventory the way the planner does.
func (h *harness) apply(p plan.Plan) {
	h.t.Helper()
	fps := map[string]string{}
	for _, op := range p.Operations {
		op = op.ForRun("71e385f001481cda", "0123456789abcdef")
		out, err := h.cl.Apply(h.ctx, op, pve.ApplyOptions{Secrets: secrets{h.w.keys}})
		if err != nil {
			h.t.Fatalf("apply %s: %v\nplan:\n%s", op.ID, err, render.PlanText(p))
		}
		fps[op.ID] = out.Fingerprint
		if op.Action == plan.ActionDelete {
			delete(h.owned, op.VMID)
		}
	}
	for _, r := range p.Record {
		o := r.Owned
		if r.After != "" {
			if o.Fingerprint == "" {
				o.Fingerprint = fps[r.After]
			}
		}
		if o.Fingerprint == "" {
			continue
		}
		h.owned[o.VMID] = o
	}
}

// prunable computes, without the planner, which guests may be deleted: the ownership tag in the raw tags
// and an ownership record with the live identity.
func prunable(obs inventory.Cluster, owned map[int]plan.Owned) map[int]bool {
	out := map[int]bool{}
	for _, g := range obs.Guests() {
		tags := strings.FieldsFunc(strings.ToLower(g.Tags), func(r rune) bool { return r == ';' || r == ',' || r == ' ' })
		rec, ok := owned[g.VMID]
		if slices.Contains(tags, "proxops") && ok && rec.Fingerprint != "" && rec.Fingerprint == inventory.Fingerprint(g) {
			out[g.VMID] = true
		}
	}
	return out
}

func propertySeeds(t *testing.T) int {
	if testing.Short() {
		return 8
	}
	return 40
}

func TestApplyingAPlanConvergesInOnePlan(t *testing.T) {
	for seed := range uint64(propertySeeds(t)) {
		t.Run(fmt.Sprintf("seed-%d", seed), func(t *testing.T) {
			w := generate(seed)
			h := newHarness(t, w)
			obs := h.observe()
			for _, vmid := range w.owned {
				if g, ok := obs.Guest(vmid); ok {
					h.owned[vmid] = plan.Owned{VMID: vmid, Ref: kindOf(g) + "/owned-" + strconv.Itoa(vmid), Node: g.Node, Fingerprint: inventory.Fingerprint(g)}
				}
			}
			for _, vmid := range w.forged {
				if g, ok := obs.Guest(vmid); ok {
					h.owned[vmid] = plan.Owned{VMID: vmid, Ref: "VM/forged-" + strconv.Itoa(vmid), Node: g.Node, Fingerprint: "uuid=00000000-dead-beef-0000-000000000000"}
				}
			}
			allowed := prunable(obs, h.owned)
			first := h.diff(obs)
			checkPrunesWaitForEverything(t, first)
			// The latch, computed without the planner: more than half of a kind's owned guests, and at least
			// three, would be pruned.
			declared := map[int]bool{}
			for _, r := range h.rp.Cluster("lab").Resources {
				declared[r.VMID()] = true
			}
			owned, doomed := map[string]int{}, map[string]int{}
			for vmid := range allowed {
				kind, _, _ := strings.Cut(h.owned[vmid].Ref, "/")
				owned[kind]++
				g, _ := obs.Guest(vmid)
				if v, _ := g.Get("protection"); !declared[vmid] && v != "1" {
					doomed[kind]++
				}
			}
			latch := false
			for kind, n := range doomed {
				latch = latch || (n >= 3 && 2*n > owned[kind])
			}
			if first.Held != latch {
				t.Errorf("plan held = %v, but the latch says %v (owned %v, pruned %v)", first.Held, latch, owned, doomed)
			}
			h.sim.ResetLog()
			h.apply(first)
			for _, req := range h.sim.Requests() {
				if req.Method != "DELETE" {
					continue
				}
				vmid := vmidOf(req.Path)
				if !allowed[vmid] {
					t.Errorf("DELETE %s reached a guest that is not both tagged and recorded with its identity", req.Path)
				}
			}
			second := h.diff(h.observe())
			deferred := map[int]bool{}
			for _, f := range first.Findings {
				if f.Kind == plan.FindingDeferredPrune {
					deferred[f.VMID] = true
				}
			}
			// Prunes the budget deferred are the next plan's to do; nothing else may be left.
			left := slices.DeleteFunc(slices.Clone(second.Operations), func(o plan.Operation) bool {
				return deferred[o.VMID] && (o.Action == plan.ActionDelete || o.Action == plan.ActionStop)
			})
			if len(left) > 0 {
				t.Errorf("the plan did not converge in one application; the next plan still has operations:\nfirst:\n%s\nsecond:\n%s",
					render.PlanText(first), render.PlanText(second))
			}
		})
	}
}

func kindOf(g inventory.Guest) string {
	switch {
	case g.Type == inventory.LXC && g.Template:
		return "TemplateCT"
	case g.Type == inventory.LXC:
		return "LXC"
	case g.Template:
		return "TemplateVM"
	}
	return "VM"
}

func vmidOf(path string) int {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	for i := len(parts) - 1; i >= 0; i-- {
		if n, err := strconv.Atoi(parts[i]); err == nil {
			return n
		}
	}
	return 0
}

// shuffled returns the same input in another order: resources, nodes, guests, config entries, storages,
// volumes and ownership records.
func shuffled(r *rand.Rand, in plan.Input) plan.Input {
	out := in
	cl := *in.Cluster
	cl.Resources = slices.Clone(cl.Resources)
	r.Shuffle(len(cl.Resources), func(i, j int) { cl.Resources[i], cl.Resources[j] = cl.Resources[j], cl.Resources[i] })
	out.Cluster = &cl
	out.Observed.Nodes = slices.Clone(in.Observed.Nodes)
	for i := range out.Observed.Nodes {
		n := &out.Observed.Nodes[i]
		n.Guests = slices.Clone(n.Guests)
		for j := range n.Guests {
			n.Guests[j].Config = slices.Clone(n.Guests[j].Config)
			cfg := n.Guests[j].Config
			r.Shuffle(len(cfg), func(a, b int) { cfg[a], cfg[b] = cfg[b], cfg[a] })
		}
		r.Shuffle(len(n.Guests), func(a, b int) { n.Guests[a], n.Guests[b] = n.Guests[b], n.Guests[a] })
		n.Storages = slices.Clone(n.Storages)
		r.Shuffle(len(n.Storages), func(a, b int) { n.Storages[a], n.Storages[b] = n.Storages[b], n.Storages[a] })
		n.Volumes = slices.Clone(n.Volumes)
		r.Shuffle(len(n.Volumes), func(a, b int) { n.Volumes[a], n.Volumes[b] = n.Volumes[b], n.Volumes[a] })
	}
	r.Shuffle(len(out.Observed.Nodes), func(a, b int) {
		out.Observed.Nodes[a], out.Observed.Nodes[b] = out.Observed.Nodes[b], out.Observed.Nodes[a]
	})
	out.Owned = slices.Clone(in.Owned)
	r.Shuffle(len(out.Owned), func(a, b int) { out.Owned[a], out.Owned[b] = out.Owned[b], out.Owned[a] })
	return out
}

func TestDiffIsDeterministicUnderInputPermutation(t *testing.T) {
	cases := caseDirs(t)
	for i, dir := range cases {
		c := loadCase(t, dir)
		wantText, wantJSON := outputs(t, c.input)
		r := rand.New(rand.NewPCG(uint64(i), 42))
		for k := range 5 {
			// Inventories arrive sorted by vmid; the planner must not rely on it.
			text, js := outputs(t, shuffled(r, c.input))
			if !bytes.Equal(text, wantText) || !bytes.Equal(js, wantJSON) {
				t.Errorf("%s: permutation %d gives another plan:\n%s\nwant:\n%s", c.name, k, text, wantText)
				break
			}
		}
	}
}

// TestUpstreamExamplesConvergeAgainstTheSimulator plans the predecessor's example repository against an
// empty simulated cluster, applies the plan through the adapter, and expects the next plan to be empty.
func TestUpstreamExamplesConvergeAgainstTheSimulator(t *testing.T) {
	spec := pvesim.DefaultSpec()
	spec.Nodes = []pvesim.NodeSpec{{Name: "pve01"}, {Name: "pve02"}}
	spec.Bridges = []string{"vmbr0", "vmbr1", "vmbr2"}
	spec.Storages = append(spec.Storages, pvesim.StorageSpec{ID: "vm_disks", Type: "lvmthin", Content: []string{"images", "rootdir"}})
	spec.TaskDurations = map[string]pvesim.Duration{"default": 0}
	spec.Seed = 3
	fsys := os.DirFS(testcorpus.Dir("upstream-examples"))
	w := &world{spec: spec, keys: map[string]string{"main": keyA, "default": "a-password"}}
	sim, err := pvesim.New(w.spec)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(sim)
	t.Cleanup(func() { srv.Close(); sim.WaitTasks() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	// PCI passthrough of unmapped devices is root@pam's alone: a ticket, not a token.
	cl, err := pve.New(ctx, pve.Config{BaseURL: srv.URL, User: "root@pam", Password: pvesim.DefaultRootPassword,
		TaskPollMin: time.Millisecond, TaskPollMax: 5 * time.Millisecond, ReadBackoff: time.Millisecond, TaskTimeout: 30 * time.Second},
		slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	rp := repo.Load(fsys)
	if ds := rp.ClusterDiagnostics("example"); ds.HasErrors() {
		t.Fatalf("the example repository does not validate:\n%v", ds)
	}
	h := &harness{t: t, ctx: ctx, sim: sim, cl: cl, rp: rp, w: w, owned: map[int]plan.Owned{}, cluster: "example", nodes: []string{"pve01", "pve02"}}
	first := h.diff(h.observe())
	if len(first.Operations) == 0 {
		t.Fatal("an empty cluster needs a plan")
	}
	h.apply(first)
	if second := h.diff(h.observe()); len(second.Operations) > 0 {
		t.Errorf("the example repository did not converge in one plan; next plan:\n%s", render.PlanText(second))
	}
}
