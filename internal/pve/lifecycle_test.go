package pve_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/proxops/proxops/internal/inventory"
	"github.com/proxops/proxops/internal/plan"
	"github.com/proxops/proxops/internal/pve"
	"github.com/proxops/proxops/internal/pvesim"
)

var reMAC = regexp.MustCompile(`[0-9A-Fa-f]{2}(:[0-9A-Fa-f]{2}){5}`)

// sharedSpec adds a shared rbd storage to the base cluster (linked clones and clones to another node).
func sharedSpec() pvesim.Spec {
	s := baseSpec()
	s.Storages = append(s.Storages, pvesim.StorageSpec{ID: "ceph", Type: "rbd", Content: []string{"images", "rootdir"}, Shared: true})
	return s
}

// makeTemplate creates a qemu guest through the adapter and marks it a template.
func makeTemplate(t *testing.T, cl *pve.Client, vmid int, values ...string) {
	t.Helper()
	mustApply(t, cl, plan.Operation{Node: "pve1", VMID: vmid, GuestType: inventory.QEMU, Action: plan.ActionCreate,
		Values: kvs(values...), Precondition: plan.Precondition{ExpectAbsent: true}}, pve.ApplyOptions{})
	mustApply(t, cl, plan.Operation{Node: "pve1", VMID: vmid, GuestType: inventory.QEMU, Action: plan.ActionMarkTemplate}, pve.ApplyOptions{})
}

// lastRequest returns the last logged request of a method and template.
func (c *simCluster) lastRequest(t *testing.T, method, template string) pvesim.RequestLogEntry {
	t.Helper()
	var last *pvesim.RequestLogEntry
	for _, r := range c.sim.Requests() {
		if r.Method == method && r.Template == template {
			last = &r
		}
	}
	if last == nil {
		t.Fatalf("no %s %s request", method, template)
	}
	return *last
}

// A full clone of a template gets new MACs and a new smbios1 uuid from PVE; the post-clone config write
// clears the inherited cloud-init identity (delete), sets the operation's values, never carries start and
// never rewrites the inherited cloud-init drive.
func TestCloneClearsInheritedIdentityAndKeepsTheCloudInitDrive(t *testing.T) {
	c := newSim(t, baseSpec())
	cl := c.client(t)
	makeTemplate(t, cl, 9000, "name", "tmpl", "memory", "2048", "scsi0", "local-lvm:4", "net0", "virtio,bridge=vmbr0",
		"ide2", "local-lvm:cloudinit", "ciuser", "admin", "ipconfig0", "ip=dhcp", "nameserver", "10.0.0.53", "tags", "base")
	src, _ := c.sim.Config(9000)

	j := &journal{}
	op := plan.Operation{Node: "pve1", VMID: 101, GuestType: inventory.QEMU, Action: plan.ActionClone, SourceVMID: 9000,
		Storage: "local-lvm", Params: kvs("newid", "101", "name", "web-01", "full", "1", "start", "1"),
		Values:       kvs("memory", "4096", "tags", "proxops", "ide2", "local-lvm:cloudinit,media=cdrom", "start", "1"),
		Delete:       []string{"ciuser", "sshkeys", "ipconfig0", "nameserver", "cicustom"},
		Precondition: plan.Precondition{ExpectAbsent: true}}
	out := mustApply(t, cl, op, pve.ApplyOptions{Journal: j})

	conf, ok := c.sim.Config(101)
	if !ok {
		t.Fatal("the clone does not exist")
	}
	if conf["name"] != "web-01" || conf["memory"] != "4096" || conf["tags"] != "proxops" {
		t.Errorf("clone config: %v", conf)
	}
	for _, k := range []string{"ciuser", "ipconfig0", "nameserver", "template", "lock"} {
		if v, ok := conf[k]; ok {
			t.Errorf("%s survived the post-clone write: %q", k, v)
		}
	}
	if sm, dm := reMAC.FindString(src["net0"]), reMAC.FindString(conf["net0"]); sm == "" || dm == "" || sm == dm {
		t.Errorf("net0: source %q, clone %q: want a new MAC", src["net0"], conf["net0"])
	}
	if conf["smbios1"] == src["smbios1"] || out.Fingerprint == "" || !strings.Contains(conf["smbios1"], strings.TrimPrefix(out.Fingerprint, "uuid=")) {
		t.Errorf("smbios1: source %q, clone %q, fingerprint %q", src["smbios1"], conf["smbios1"], out.Fingerprint)
	}
	if conf["ide2"] != "local-lvm:vm-101-cloudinit,media=cdrom" {
		t.Errorf("cloud-init drive %q, want the inherited copy", conf["ide2"])
	}
	if !strings.HasPrefix(conf["scsi0"], "local-lvm:vm-101-disk-0") {
		t.Errorf("scsi0 %q: want a full copy", conf["scsi0"])
	}
	if !strings.Contains(out.Message, "inherited cloud-init drive ide2") {
		t.Errorf("outcome message %q does not say the drive was kept", out.Message)
	}

	req := c.lastRequest(t, "POST", "/nodes/{node}/qemu/{vmid}/clone")
	if _, ok := req.Params["start"]; ok || req.Params["full"] != "1" || req.Params["name"] != "web-01" || req.Params["newid"] != "101" {
		t.Errorf("clone request %v", req.Params)
	}
	write := c.lastRequest(t, "POST", "/nodes/{node}/qemu/{vmid}/config")
	if _, ok := write.Params["ide2"]; ok {
		t.Errorf("the post-clone write rewrote the cloud-init drive: %v", write.Params)
	}
	if _, ok := write.Params["start"]; ok || write.Params["delete"] != "ciuser,sshkeys,ipconfig0,nameserver,cicustom" || write.Params["digest"] == "" {
		t.Errorf("post-clone write %v", write.Params)
	}
	if len(j.intents) != 1 || j.intents[0].TaskType != "qmclone" || j.intents[0].ID != "9000" || len(j.upids) != 1 {
		t.Errorf("journal %+v", j)
	}

	// A set key that is also deleted is refused before anything is sent.
	bad := op
	bad.VMID, bad.Params = 102, kvs("name", "x")
	bad.Delete = []string{"memory"}
	before := c.count("POST", "/nodes/{node}/qemu/{vmid}/clone")
	if _, err := apply(t, cl, bad, pve.ApplyOptions{}); pve.ClassOf(err) != plan.ErrorTerminal {
		t.Fatalf("set and delete of one key: %v", err)
	}
	if c.count("POST", "/nodes/{node}/qemu/{vmid}/clone") != before || c.sim.Exists(102) {
		t.Fatal("a clone was sent for a refused operation")
	}
}

// A linked clone (full=0) of a template on shared storage, placed on another node with target: the guest
// ends up on the target with a volume linked to the base, and the post-clone write goes to the target.
func TestLinkedCloneToAnotherNode(t *testing.T) {
	c := newSim(t, sharedSpec())
	cl := c.client(t)
	makeTemplate(t, cl, 9001, "name", "base", "scsi0", "ceph:4", "net0", "virtio,bridge=vmbr0")
	op := plan.Operation{Node: "pve1", VMID: 120, GuestType: inventory.QEMU, Action: plan.ActionClone, SourceVMID: 9001,
		Params: kvs("name", "linked", "full", "0", "target", "pve2"), Values: kvs("cores", "3")}
	mustApply(t, cl, op, pve.ApplyOptions{})
	if node, _, ok := c.sim.NodeOf(120); !ok || node != "pve2" {
		t.Fatalf("clone on node %q (exists %v), want pve2", node, ok)
	}
	conf, _ := c.sim.Config(120)
	if !strings.HasPrefix(conf["scsi0"], "ceph:base-9001-disk-0/vm-120-disk-0") || conf["cores"] != "3" {
		t.Fatalf("linked clone config %v", conf)
	}
	if w := c.lastRequest(t, "POST", "/nodes/{node}/qemu/{vmid}/config"); w.Path != "/nodes/pve2/qemu/120/config" {
		t.Errorf("post-clone write went to %s", w.Path)
	}

	// A clone to another node of a guest on local storage is refused by PVE at once: terminal, nothing made.
	makeTemplate(t, cl, 9002, "scsi0", "local-lvm:1")
	op.VMID, op.SourceVMID = 121, 9002
	if _, err := apply(t, cl, op, pve.ApplyOptions{}); pve.ClassOf(err) != plan.ErrorTerminal || !strings.Contains(err.Error(), "local storage") {
		t.Fatalf("clone of local storage to another node: %v", err)
	}
	if c.sim.Exists(121) {
		t.Fatal("guest 121 exists")
	}
}

func TestLXCCloneTakesTheHostnameAndANewMAC(t *testing.T) {
	spec := baseSpec()
	spec.Guests = []pvesim.GuestSpec{{VMID: 200, Type: "lxc", Node: "pve1", Config: seedCT}}
	c := newSim(t, spec)
	cl := c.client(t)
	op := plan.Operation{Node: "pve1", VMID: 201, GuestType: inventory.LXC, Action: plan.ActionClone, SourceVMID: 200,
		Params: kvs("name", "ct-copy"), Values: kvs("memory", "1024"), Delete: []string{"nameserver"}}
	out := mustApply(t, cl, op, pve.ApplyOptions{})
	conf, ok := c.sim.Config(201)
	if !ok || conf["hostname"] != "ct-copy" || conf["memory"] != "1024" || conf["lock"] != "" {
		t.Fatalf("clone config %v", conf)
	}
	if reMAC.FindString(conf["net0"]) == "BC:24:11:00:02:00" || !strings.HasPrefix(out.Fingerprint, "hwaddr=") {
		t.Errorf("net0 %q, fingerprint %q: want a new MAC", conf["net0"], out.Fingerprint)
	}
	if src, _ := c.sim.Config(200); src["lock"] != "" {
		t.Errorf("the source kept lock %q", src["lock"])
	}
	if c.count("PUT", "/nodes/{node}/lxc/{vmid}/config") != 1 {
		t.Errorf("post-clone writes: %v", c.sim.Counts())
	}
}

// A clone whose first delivery died after PVE accepted it (intent recorded, UPID not) is not sent again:
// the redelivery sees the new vmid taken with lock: clone, waits for it, and does the post-clone write.
func TestRedeliveredCloneWaitsForTheEarlierCloneInsteadOfCloningAgain(t *testing.T) {
	spec := baseSpec()
	spec.Guests = []pvesim.GuestSpec{{VMID: 100, Type: "qemu", Node: "pve1", Config: seedVM}}
	spec.TaskDurations = map[string]pvesim.Duration{"default": pvesim.Duration(5 * time.Millisecond),
		"qmclone": pvesim.Duration(400 * time.Millisecond)}
	c := newSim(t, spec)
	cl := c.client(t)
	op := plan.Operation{Node: "pve1", VMID: 130, GuestType: inventory.QEMU, Action: plan.ActionClone, SourceVMID: 100,
		Params: kvs("name", "copy"), Values: kvs("memory", "1024"), Precondition: plan.Precondition{ExpectAbsent: true}}
	clones := func() int { return c.count("POST", "/nodes/{node}/qemu/{vmid}/clone") }

	j := &journal{}
	ctx, cancel := context.WithCancel(testContext(t))
	go func() {
		for clones() == 0 {
			time.Sleep(time.Millisecond)
		}
		cancel()
	}()
	if _, err := cl.Apply(ctx, op, pve.ApplyOptions{Journal: j}); err == nil {
		t.Fatal("the first delivery finished although its context ended")
	}
	if len(j.intents) != 1 {
		t.Fatalf("intents %+v", j.intents)
	}
	in := j.intents[0]
	out := mustApply(t, cl, op, pve.ApplyOptions{Journal: &journal{}, Prior: pve.Prior{Intent: &in}})
	if n := clones(); n != 1 {
		t.Fatalf("%d clones sent, want 1", n)
	}
	if conf, _ := c.sim.Config(130); conf["name"] != "copy" || conf["memory"] != "1024" || conf["lock"] != "" {
		t.Fatalf("clone config %v", conf)
	}
	if out.Fingerprint == "" {
		t.Errorf("outcome %+v", out)
	}

	// Another guest under the vmid (its name is not the clone's) is never taken for the earlier clone.
	other := op
	other.VMID, other.Params = 100, kvs("name", "not-web")
	other.SourceVMID = 130
	if _, err := apply(t, cl, other, pve.ApplyOptions{Prior: pve.Prior{Intent: &in}}); pve.ClassOf(err) != plan.ErrorConflict {
		t.Fatalf("redelivery over a foreign guest: %v", err)
	}
	if n := clones(); n != 1 {
		t.Fatalf("%d clones sent, want 1", n)
	}
}

func TestMarkTemplateConvertsAndIsDoneOnRedelivery(t *testing.T) {
	spec := baseSpec()
	spec.Guests = []pvesim.GuestSpec{{VMID: 100, Type: "qemu", Node: "pve1", Config: seedVM},
		{VMID: 200, Type: "lxc", Node: "pve1", Config: seedCT}}
	spec.TaskDurations = map[string]pvesim.Duration{"default": pvesim.Duration(5 * time.Millisecond),
		"vztemplate": pvesim.Duration(1500 * time.Millisecond)}
	c := newSim(t, spec)
	cl := c.client(t)

	vm := plan.Operation{Node: "pve1", VMID: 100, GuestType: inventory.QEMU, Action: plan.ActionMarkTemplate}
	out := mustApply(t, cl, vm, pve.ApplyOptions{})
	conf, _ := c.sim.Config(100)
	if conf["template"] != "1" || !strings.HasPrefix(conf["scsi0"], "local-lvm:base-100-disk-0") || !strings.Contains(out.UPID, ":qmtemplate:100:") {
		t.Fatalf("after qemu mark-template: %v, upid %s", conf, out.UPID)
	}
	if out := mustApply(t, cl, vm, pve.ApplyOptions{}); !out.AlreadyDone || c.count("POST", "/nodes/{node}/qemu/{vmid}/template") != 1 {
		t.Fatalf("redelivered qemu mark-template: %+v, %v", out, c.sim.Counts())
	}

	// lxc answers null; the background conversion is found and waited for. A delivery that dies while it
	// runs is followed by one that waits for it and sends nothing.
	ct := plan.Operation{Node: "pve1", VMID: 200, GuestType: inventory.LXC, Action: plan.ActionMarkTemplate}
	templates := func() int { return c.count("POST", "/nodes/{node}/lxc/{vmid}/template") }
	ctx, cancel := context.WithCancel(testContext(t))
	go func() {
		for templates() == 0 {
			time.Sleep(time.Millisecond)
		}
		cancel()
	}()
	if _, err := cl.Apply(ctx, ct, pve.ApplyOptions{}); err == nil {
		t.Fatal("the first delivery finished although its context ended")
	}
	if conf, _ := c.sim.Config(200); conf["template"] == "1" {
		t.Fatal("setup: the conversion finished before the redelivery")
	}
	out = mustApply(t, cl, ct, pve.ApplyOptions{})
	conf, _ = c.sim.Config(200)
	if !out.AlreadyDone || templates() != 1 || conf["template"] != "1" || !strings.HasPrefix(conf["rootfs"], "local-lvm:base-200-disk-0") {
		t.Fatalf("redelivered lxc mark-template: %+v, config %v, %d requests", out, conf, templates())
	}

	// A fresh lxc conversion reports its background task.
	spec2 := baseSpec()
	spec2.Guests = []pvesim.GuestSpec{{VMID: 200, Type: "lxc", Node: "pve1", Config: seedCT}}
	c2 := newSim(t, spec2)
	out = mustApply(t, c2.client(t), ct, pve.ApplyOptions{})
	if conf, _ := c2.sim.Config(200); conf["template"] != "1" || !strings.Contains(out.UPID, ":vztemplate:200:") {
		t.Fatalf("lxc mark-template: %v, upid %q", conf, out.UPID)
	}
}

func TestResizeGrowsToAnAbsoluteSizeOnly(t *testing.T) {
	spec := baseSpec()
	spec.Guests = []pvesim.GuestSpec{{VMID: 100, Type: "qemu", Node: "pve1", Config: seedVM},
		{VMID: 200, Type: "lxc", Node: "pve1", Config: seedCT}}
	c := newSim(t, spec)
	cl := c.client(t)
	resize := func(vmid int, typ inventory.GuestType, disk, size string) plan.Operation {
		return plan.Operation{Node: "pve1", VMID: vmid, GuestType: typ, Action: plan.ActionResize, Params: kvs("disk", disk, "size", size)}
	}
	out := mustApply(t, cl, resize(100, inventory.QEMU, "scsi0", "20G"), pve.ApplyOptions{})
	if conf, _ := c.sim.Config(100); conf["scsi0"] != "local-lvm:vm-100-disk-0,size=20G" || !strings.Contains(out.UPID, ":resize:100:") {
		t.Fatalf("after resize: %q, upid %s", conf["scsi0"], out.UPID)
	}
	puts := func() int { return c.count("PUT", "/nodes/{node}/qemu/{vmid}/resize") }
	if out := mustApply(t, cl, resize(100, inventory.QEMU, "scsi0", "20G"), pve.ApplyOptions{}); !out.AlreadyDone || puts() != 1 {
		t.Fatalf("redelivered resize: %+v, %d requests", out, puts())
	}
	// A disk already larger stays as it is: resize only grows.
	if out := mustApply(t, cl, resize(100, inventory.QEMU, "scsi0", "10G"), pve.ApplyOptions{}); !out.AlreadyDone || puts() != 1 {
		t.Fatalf("resize below the current size: %+v, %d requests", out, puts())
	}
	// A relative size would grow again on every redelivery: refused unsent.
	if _, err := apply(t, cl, resize(100, inventory.QEMU, "scsi0", "+2G"), pve.ApplyOptions{}); pve.ClassOf(err) != plan.ErrorTerminal || puts() != 1 {
		t.Fatalf("relative resize: %v, %d requests", err, puts())
	}
	if _, err := apply(t, cl, resize(100, inventory.QEMU, "scsi7", "20G"), pve.ApplyOptions{}); pve.ClassOf(err) != plan.ErrorConflict {
		t.Fatalf("resize of a missing disk: %v", err)
	}
	mustApply(t, cl, resize(200, inventory.LXC, "rootfs", "6G"), pve.ApplyOptions{})
	if conf, _ := c.sim.Config(200); conf["rootfs"] != "local-lvm:vm-200-disk-0,size=6G" {
		t.Fatalf("lxc rootfs after resize: %q", conf["rootfs"])
	}
}

// artifactServer serves one file on loopback, counting fetches; hold blocks every fetch until released.
type artifactServer struct {
	srv     *httptest.Server
	body    []byte
	fetches atomic.Int32
	hold    chan struct{}
	once    sync.Once
}

func newArtifactServer(t *testing.T, body []byte, hold bool) *artifactServer {
	t.Helper()
	a := &artifactServer{body: body}
	if hold {
		a.hold = make(chan struct{})
	}
	a.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.fetches.Add(1)
		if a.hold != nil {
			select {
			case <-a.hold:
			case <-r.Context().Done():
				return
			}
		}
		_, _ = w.Write(a.body)
	}))
	t.Cleanup(func() { a.release(); a.srv.Close() })
	return a
}

// release lets the held fetches through.
func (a *artifactServer) release() {
	if a.hold != nil {
		a.once.Do(func() { close(a.hold) })
	}
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func downloadOp(u, filename, checksum string, expectAbsent bool) plan.Operation {
	params := kvs("url", u, "filename", filename, "content", "iso")
	if checksum != "" {
		params = append(params, kvs("checksum", checksum, "checksum-algorithm", "sha256")...)
	}
	return plan.Operation{Node: "pve1", Action: plan.ActionDownload, Storage: "local", Params: params,
		Precondition: plan.Precondition{ExpectAbsent: expectAbsent}}
}

// volumes lists a storage's iso volumes with their sizes.
func volumes(t *testing.T, cl *pve.Client) map[string]int64 {
	t.Helper()
	n, err := cl.Observe(testContext(t), pve.ObserveRequest{Cluster: "lab", Node: "pve1", ContentStorages: []string{"local"}})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, v := range n.Volumes {
		out[v.Volid] = v.Size
	}
	return out
}

// download-url fetches a loopback URL for real and verifies the checksum; a file already there is never
// downloaded again: a redelivery after success is done, a present file is verified by PVE against the
// checksum, and a present file that cannot be verified is a conflict when the plan expected it absent.
func TestDownloadFetchesVerifiesAndNeverOverwrites(t *testing.T) {
	c := newSim(t, baseSpec())
	cl := c.client(t)
	body := []byte(strings.Repeat("proxops test image\n", 4096))
	art := newArtifactServer(t, body, false)
	posts := func() int { return c.count("POST", "/nodes/{node}/storage/{storage}/download-url") }

	j := &journal{}
	op := downloadOp(art.srv.URL+"/tiny.iso", "tiny.iso", sha256Hex(body), true)
	out := mustApply(t, cl, op, pve.ApplyOptions{Journal: j})
	if size := volumes(t, cl)["local:iso/tiny.iso"]; size != int64(len(body)) {
		t.Fatalf("tiny.iso size %d on storage, want %d", size, len(body))
	}
	req := c.lastRequest(t, "POST", "/nodes/{node}/storage/{storage}/download-url")
	if req.Params["checksum"] != sha256Hex(body) || req.Params["checksum-algorithm"] != "sha256" || req.Params["filename"] != "tiny.iso" {
		t.Errorf("download request %v", req.Params)
	}
	if !strings.Contains(out.UPID, ":download:tiny.iso:") || art.fetches.Load() != 1 || len(j.intents) != 1 || len(j.upids) != 1 {
		t.Fatalf("outcome %+v, %d fetches, journal %+v", out, art.fetches.Load(), j)
	}

	// Redelivered after success: the recorded task succeeded and the file is there.
	in := j.intents[0]
	out = mustApply(t, cl, op, pve.ApplyOptions{Prior: pve.Prior{Intent: &in, UPID: j.upids[0]}})
	if !out.AlreadyDone || posts() != 1 {
		t.Fatalf("redelivered download: %+v, %d requests", out, posts())
	}

	// Another operation finding the file: PVE checks it against the checksum without fetching.
	out = mustApply(t, cl, op, pve.ApplyOptions{})
	if !out.AlreadyDone || posts() != 2 || art.fetches.Load() != 1 {
		t.Fatalf("present file with a matching checksum: %+v, %d requests, %d fetches", out, posts(), art.fetches.Load())
	}
	wrong := downloadOp(art.srv.URL+"/tiny.iso", "tiny.iso", sha256Hex([]byte("other")), true)
	if _, err := apply(t, cl, wrong, pve.ApplyOptions{}); pve.ClassOf(err) != plan.ErrorTerminal || !strings.Contains(err.Error(), "checksum mismatch") {
		t.Fatalf("present file with another checksum: %v", err)
	}
	if size := volumes(t, cl)["local:iso/tiny.iso"]; size != int64(len(body)) || art.fetches.Load() != 1 {
		t.Fatalf("the file was replaced: size %d, %d fetches", size, art.fetches.Load())
	}

	// Without a checksum a present file cannot be verified.
	before := posts()
	unverified := downloadOp(art.srv.URL+"/tiny.iso", "tiny.iso", "", true)
	if _, err := apply(t, cl, unverified, pve.ApplyOptions{}); pve.ClassOf(err) != plan.ErrorConflict {
		t.Fatalf("unverifiable present file, expected absent: %v", err)
	}
	unverified.Precondition.ExpectAbsent = false
	if out := mustApply(t, cl, unverified, pve.ApplyOptions{}); !out.AlreadyDone || !strings.Contains(out.Message, "not verified") {
		t.Fatalf("unverifiable present file: %+v", out)
	}
	if posts() != before {
		t.Fatalf("%d download requests for a file that cannot be verified", posts()-before)
	}
}

// A download redelivered while its task still runs (intent recorded, UPID not) re-attaches to the task
// found in the node's task list: one download-url request, one fetch.
func TestRedeliveredDownloadReattachesToTheRunningTask(t *testing.T) {
	c := newSim(t, baseSpec())
	cl := c.client(t)
	body := []byte("slow image")
	art := newArtifactServer(t, body, true)
	op := downloadOp(art.srv.URL+"/slow.iso", "slow.iso", sha256Hex(body), true)
	posts := func() int { return c.count("POST", "/nodes/{node}/storage/{storage}/download-url") }

	j := &journal{}
	ctx, cancel := context.WithCancel(testContext(t))
	go func() {
		for art.fetches.Load() == 0 {
			time.Sleep(time.Millisecond)
		}
		cancel()
	}()
	if _, err := cl.Apply(ctx, op, pve.ApplyOptions{Journal: j}); err == nil {
		t.Fatal("the first delivery finished although its context ended")
	}
	in := j.intents[0]
	j2 := &journal{}
	done := make(chan struct{})
	var out pve.Outcome
	var err error
	go func() {
		defer close(done)
		out, err = cl.Apply(testContext(t), op, pve.ApplyOptions{Journal: j2, Prior: pve.Prior{Intent: &in}})
	}()
	// The redelivery has found the running task (and recorded it) before the fetch is let through.
	deadline := time.Now().Add(30 * time.Second)
	for {
		j2.mu.Lock()
		n := len(j2.upids)
		j2.mu.Unlock()
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the redelivery did not find the running download task")
		}
		time.Sleep(5 * time.Millisecond)
	}
	art.release()
	<-done
	if err != nil {
		t.Fatalf("redelivered download: %v", err)
	}
	if posts() != 1 || art.fetches.Load() != 1 || out.UPID != j2.upids[0] || len(j2.intents) != 0 {
		t.Fatalf("%d requests, %d fetches, outcome %+v, journal %+v", posts(), art.fetches.Load(), out, j2)
	}
	if volumes(t, cl)["local:iso/slow.iso"] != int64(len(body)) {
		t.Fatal("slow.iso missing after the download")
	}
}

// simPost sends a request to the simulator's API as the root token (for setups the adapter has no
// operation for, such as pausing a VM).
func (c *simCluster) simPost(t *testing.T, path string) {
	t.Helper()
	if err := c.sim.AdminRequest(http.MethodPost, path, nil); err != nil {
		t.Fatal(err)
	}
}

func qmpStatus(t *testing.T, cl *pve.Client, vmid int) string {
	t.Helper()
	n, err := cl.Observe(testContext(t), pve.ObserveRequest{Cluster: "lab", Node: "pve1"})
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range n.Guests {
		if g.VMID == vmid {
			return g.QMPStatus
		}
	}
	return ""
}

func TestResumeContinuesAPausedVM(t *testing.T) {
	spec := baseSpec()
	spec.Guests = []pvesim.GuestSpec{{VMID: 100, Type: "qemu", Node: "pve1", Config: seedVM, Running: true},
		{VMID: 101, Type: "qemu", Node: "pve1", Config: strings.ReplaceAll(seedVM, "vm-100-", "vm-101-")}}
	c := newSim(t, spec)
	cl := c.client(t)
	c.simPost(t, "/nodes/pve1/qemu/100/status/suspend")
	deadline := time.Now().Add(30 * time.Second)
	for qmpStatus(t, cl, 100) != "paused" {
		if time.Now().After(deadline) {
			t.Fatal("setup: the VM did not pause")
		}
		time.Sleep(10 * time.Millisecond)
	}
	out := mustApply(t, cl, plan.Operation{Node: "pve1", VMID: 100, GuestType: inventory.QEMU, Action: plan.ActionResume}, pve.ApplyOptions{})
	if st := qmpStatus(t, cl, 100); st != "running" || !c.sim.Running(100) || !strings.Contains(out.UPID, ":qmresume:100:") {
		t.Fatalf("after resume: qmpstatus %q, running %v, upid %s", st, c.sim.Running(100), out.UPID)
	}
	// Resuming a stopped VM is refused by PVE: a terminal failure, the VM stays off.
	_, err := apply(t, cl, plan.Operation{Node: "pve1", VMID: 101, GuestType: inventory.QEMU, Action: plan.ActionResume}, pve.ApplyOptions{})
	if pve.ClassOf(err) != plan.ErrorTerminal || c.sim.Running(101) {
		t.Fatalf("resume of a stopped VM: %v", err)
	}
}

// A guest that ignores ACPI is shut down gracefully with the timeout and then stopped (forceStop, the
// default); with forceStop=0 the timeout is a failure and the guest keeps running.
func TestShutdownStopsAGuestThatIgnoresACPIAfterTheTimeout(t *testing.T) {
	spec := baseSpec()
	spec.Guests = []pvesim.GuestSpec{
		{VMID: 100, Type: "qemu", Node: "pve1", Config: seedVM, Running: true, IgnoreACPI: true},
		{VMID: 101, Type: "qemu", Node: "pve1", Config: strings.ReplaceAll(seedVM, "vm-100-", "vm-101-"), Running: true, IgnoreACPI: true},
		{VMID: 200, Type: "lxc", Node: "pve1", Config: seedCT, Running: true, IgnoreACPI: true},
	}
	spec.ShutdownWait = pvesim.Duration(150 * time.Millisecond)
	c := newSim(t, spec)
	cl := c.client(t)
	shutdown := func(vmid int, typ inventory.GuestType, params ...string) plan.Operation {
		return plan.Operation{Node: "pve1", VMID: vmid, GuestType: typ, Action: plan.ActionShutdown, Params: kvs(params...)}
	}
	out := mustApply(t, cl, shutdown(100, inventory.QEMU, "timeout", "5"), pve.ApplyOptions{})
	if c.sim.Running(100) || !strings.Contains(strings.Join(out.TaskLog, "\n"), "terminating now") {
		t.Fatalf("after shutdown: running %v, task log %q", c.sim.Running(100), out.TaskLog)
	}
	if r := c.lastRequest(t, "POST", "/nodes/{node}/qemu/{vmid}/status/shutdown"); r.Params["timeout"] != "5" || r.Params["forceStop"] != "1" {
		t.Errorf("shutdown request %v", r.Params)
	}
	_, err := apply(t, cl, shutdown(101, inventory.QEMU, "timeout", "5", "forceStop", "0"), pve.ApplyOptions{})
	if pve.ClassOf(err) != plan.ErrorTerminal || !strings.Contains(err.Error(), "powerdown failed - got timeout") || !c.sim.Running(101) {
		t.Fatalf("graceful-only shutdown of a guest ignoring ACPI: %v (class %s), running %v", err, pve.ClassOf(err), c.sim.Running(101))
	}
	mustApply(t, cl, shutdown(200, inventory.LXC, "timeout", "5"), pve.ApplyOptions{})
	if c.sim.Running(200) {
		t.Fatal("container 200 still running")
	}
}

// A task that ends with "WARNINGS: n" did its work (pve-common's status_is_error says it is no error): the
// adapter reports success, and the guest is running.
func TestATaskEndingWithWarningsIsASuccess(t *testing.T) {
	spec := baseSpec()
	spec.Guests = []pvesim.GuestSpec{{VMID: 100, Type: "qemu", Node: "pve1", Config: seedVM}}
	c := newSim(t, spec)
	if err := c.sim.SetFaults(pvesim.Faults{TaskWarningRate: 1, TaskTypes: []string{"qmstart"}}); err != nil {
		t.Fatal(err)
	}
	out := mustApply(t, c.client(t), plan.Operation{Node: "pve1", VMID: 100, GuestType: inventory.QEMU, Action: plan.ActionStart}, pve.ApplyOptions{})
	if !strings.Contains(out.UPID, ":qmstart:100:") {
		t.Fatalf("start: %+v", out)
	}
	req, err := http.NewRequest(http.MethodGet, c.srv.URL+"/api2/json/nodes/pve1/tasks/"+url.PathEscape(out.UPID)+"/status", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "PVEAPIToken="+pvesim.DefaultRootTokenID+"="+pvesim.DefaultRootTokenSecret)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	var status struct {
		Data struct {
			Status     string `json:"status"`
			ExitStatus string `json:"exitstatus"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&status); err != nil {
		t.Fatal(err)
	}
	if status.Data.Status != "stopped" || status.Data.ExitStatus != "WARNINGS: 1" {
		t.Fatalf("the start task did not end with warnings: %+v", status.Data)
	}
	if !c.sim.Running(100) {
		t.Fatal("the guest is not running after a start that ended with warnings")
	}
	if !slices.Contains(out.TaskLog, "WARN: injected warning") {
		t.Fatalf("the outcome of a task that ended with warnings lacks them: %q", out.TaskLog)
	}
}

// A task that ended plainly "OK" logged nothing a result needs: its log is not read. A failed task's log
// is, and ends up in the error.
func TestTheLogOfATaskIsReadOnlyWhenItSaysMoreThanOK(t *testing.T) {
	spec := baseSpec()
	spec.Guests = []pvesim.GuestSpec{{VMID: 100, Type: "qemu", Node: "pve1", Config: seedVM}}
	c := newSim(t, spec)
	cl := c.client(t)
	const logPath = "/nodes/{node}/tasks/{upid}/log"
	out := mustApply(t, cl, plan.Operation{Node: "pve1", VMID: 100, GuestType: inventory.QEMU, Action: plan.ActionStart}, pve.ApplyOptions{})
	if out.UPID == "" || out.TaskLog != nil || c.count("GET", logPath) != 0 {
		t.Fatalf("a start that ended OK: outcome %+v, %d log reads", out, c.count("GET", logPath))
	}
	if err := c.sim.SetFaults(pvesim.Faults{TaskFailureRate: 1, TaskTypes: []string{"qmstop"}}); err != nil {
		t.Fatal(err)
	}
	_, err := apply(t, cl, plan.Operation{Node: "pve1", VMID: 100, GuestType: inventory.QEMU, Action: plan.ActionStop}, pve.ApplyOptions{})
	var pe *pve.Error
	if !errors.As(err, &pe) || len(pe.TaskLog) == 0 || c.count("GET", logPath) != 1 {
		t.Fatalf("a stop that failed: %v, task log %v, %d log reads", err, pe, c.count("GET", logPath))
	}
}
