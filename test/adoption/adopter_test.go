package adoption_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"

	"github.com/proxops/proxops/internal/adopt"
	"github.com/proxops/proxops/internal/bus"
	"github.com/proxops/proxops/internal/event"
	"github.com/proxops/proxops/internal/inventory"
	"github.com/proxops/proxops/internal/plan"
	"github.com/proxops/proxops/internal/pve"
	"github.com/proxops/proxops/internal/pveformat"
	"github.com/proxops/proxops/internal/pvesim"
	"github.com/proxops/proxops/internal/render"
	"github.com/proxops/proxops/internal/report"
	"github.com/proxops/proxops/internal/secrets"
	"github.com/proxops/proxops/internal/testcorpus"
	"github.com/proxops/proxops/internal/testkit"
	"github.com/proxops/proxops/internal/treestore"
	"github.com/proxops/proxops/internal/wire"
	"github.com/proxops/proxops/services/adopter"
	"github.com/proxops/proxops/services/executor"
	"github.com/proxops/proxops/services/status"
)

const cluster = "lab"

// The throwaway demo secrets file: its keys and password may appear nowhere adoption or the gap reports go.
var (
	demoKeyMain   = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIIWhx1YvPOhrV7lq5lXWf9htZgfI6YCGpGqk/KdUDRQa demo-main@proxops.invalid"
	demoKeyBackup = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJsps1rIPozbWn1kk9titEhxdDnn6/OkqLVRPa5sbxtV demo-backup@proxops.invalid"
	strayKey      = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIStrayStrayStrayStrayStrayStrayStrayStray stray@laptop"
	ciPassword    = "Live-Cloudinit-Passw0rd-9q"
)

func testContext(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func testLogger(t testing.TB) *slog.Logger {
	if os.Getenv("PROXOPS_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With("test", t.Name())
	}
	return slog.New(slog.DiscardHandler)
}

// env is a provisioned NATS server, the simulator behind loopback HTTP, and services started on them. With
// users, every service connects as its deployment user (its own permissions).
type env struct {
	t      *testing.T
	server *bus.Server
	admin  *bus.Bus
	sim    *pvesim.Sim
	srv    *httptest.Server
	users  bool
	cliBus *bus.Bus
}

func newEnv(t *testing.T, spec pvesim.Spec) *env { return newEnvUsers(t, spec, false) }

func newEnvUsers(t *testing.T, spec pvesim.Spec, withUsers bool) *env {
	t.Helper()
	var users []bus.User
	if withUsers {
		services, err := bus.ServiceUsers([]bus.ClusterNodes{{Cluster: cluster, Nodes: []string{"pve1", "pve2"}}})
		if err != nil {
			t.Fatal(err)
		}
		for _, u := range services {
			users = append(users, bus.User{Name: u.Name, Password: "pw-" + u.Name, Permissions: u.Permissions})
		}
	}
	server, err := bus.StartServer(testContext(t), bus.ServerConfig{Dir: t.TempDir(), Users: users})
	if err != nil {
		t.Fatalf("start nats: %v", err)
	}
	t.Cleanup(server.Shutdown)
	admin, err := server.Connect(bus.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Close() })
	if _, err := admin.Provision(testContext(t), bus.ProvisionConfig{}); err != nil {
		t.Fatalf("provision: %v", err)
	}
	spec.Seed = 3
	sim, err := pvesim.New(spec)
	if err != nil {
		t.Fatalf("simulator: %v", err)
	}
	srv := httptest.NewServer(sim)
	t.Cleanup(func() { srv.Close(); sim.WaitTasks() })
	return &env{t: t, server: server, admin: admin, sim: sim, srv: srv, users: withUsers}
}

// connect opens a connection as a service would: as its deployment user when the env has users.
func (e *env) connect(user string) *bus.Bus {
	e.t.Helper()
	var b *bus.Bus
	var err error
	if e.users {
		b, err = e.server.ConnectUser(user, "pw-"+user, bus.Options{APITimeout: 3 * time.Second})
	} else {
		b, err = e.server.Connect(bus.Options{})
	}
	if err != nil {
		e.t.Fatalf("connect as %s: %v", user, err)
	}
	e.t.Cleanup(func() { _ = b.Close() })
	return b
}

// run runs a service until the returned stop is called or the test ends.
func (e *env) run(what string, fn func(context.Context) error) (stop func()) {
	return testkit.RunService(e.t, what, fn)
}

func (e *env) startExecutor(node string) {
	user, _ := bus.ExecutorUser(cluster, node)
	cfg := executor.Config{Cluster: cluster, Node: node, Replica: "exec-" + node, Bus: e.connect(user),
		PVE: pve.Config{BaseURL: e.srv.URL, TokenID: pvesim.DefaultRootTokenID, TokenSecret: pvesim.DefaultRootTokenSecret,
			ReadBackoff: time.Millisecond},
		TrustedPlannerKeys: []string{testkit.PlannerKey(e.t).PublicKey()}, Logger: testLogger(e.t).With("executor", node)}
	e.run("executor "+node, func(ctx context.Context) error { return executor.Run(ctx, cfg) })
	durable, _ := bus.ExecutorConsumer(cluster, node)
	testkit.Eventually(e.t, 20*time.Second, "executor of "+node, func() bool {
		_, err := e.admin.JetStream().Consumer(testContext(e.t), bus.StreamOps, durable)
		return err == nil
	})
}

func (e *env) startAdopter(keys secrets.KeySource) (stop func()) {
	cfg := adopter.Config{Bus: e.connect("adopter"), Keys: keys, ObserveTimeout: 20 * time.Second, Logger: testLogger(e.t)}
	stop = e.run("adopter", func(ctx context.Context) error { return adopter.Run(ctx, cfg) })
	testkit.Eventually(e.t, 20*time.Second, "the adopter serving", func() bool {
		// An empty request is refused with an error reply: the adopter is there.
		subject, _ := bus.AdoptSubject(cluster)
		_, err := e.admin.Conn().Request(subject, nil, 200*time.Millisecond)
		return !errors.Is(err, nats.ErrNoResponders)
	})
	return stop
}

// cli is the operator's connection (the cli user when the env has users).
func (e *env) cli() *bus.Bus {
	e.t.Helper()
	if e.cliBus == nil {
		e.cliBus = e.connect("cli")
	}
	return e.cliBus
}

// observe asks a node's executors for an inventory, as the planner does; the executor publishes it.
func (e *env) observe(node string) {
	e.t.Helper()
	subject, _ := bus.ObserveSubject(cluster, node)
	req := wire.ObserveRequestToProto(wire.ObserveRequest{Cluster: cluster, Node: node, RequestID: "test-" + node})
	_, err := wire.DecodeNodeInventory(testContext(e.t), func(ctx context.Context, into proto.Message) error {
		return e.admin.Request(ctx, subject, req, into)
	})
	if err != nil {
		e.t.Fatalf("observe %s: %v", node, err)
	}
}

// inventoriesHandled waits until the adopter has handled every inventory on the stream.
func (e *env) inventoriesHandled() {
	e.t.Helper()
	testkit.Eventually(e.t, 20*time.Second, "the adopter to handle every inventory", func() bool {
		c, err := e.admin.JetStream().Consumer(testContext(e.t), bus.StreamInventory, bus.ConsumerAdopterInventory)
		if err != nil {
			return false
		}
		info, err := c.Info(testContext(e.t))
		return err == nil && info.NumPending == 0 && info.NumAckPending == 0
	})
}

// gapReport reads the last gap report of the cluster, with its stream sequence.
func (e *env) gapReport() (inventory.GapReport, uint64, bool) {
	subject, _ := bus.GapSubject(cluster)
	m, err := e.admin.LastMessage(testContext(e.t), bus.StreamGaps, subject)
	if err != nil {
		return inventory.GapReport{}, 0, false
	}
	rep, err := wire.DecodeGapReport(testContext(e.t), m.Decode)
	if err != nil {
		e.t.Fatalf("gap report: %v", err)
	}
	return rep, m.Sequence, true
}

func gapKeys(rep inventory.GapReport) []string {
	var out []string
	for _, g := range rep.Gaps {
		m := ""
		if g.Managed {
			m = " (managed)"
		}
		out = append(out, fmt.Sprintf("%d %s/%s %s=%s%s", g.VMID, g.Kind, g.Name, g.Key, g.Value, m))
	}
	return out
}

func labSpec() pvesim.Spec {
	s := pvesim.DefaultSpec()
	s.Nodes = []pvesim.NodeSpec{{Name: "pve1"}, {Name: "pve2"}}
	s.Files = []pvesim.FileSpec{{VolID: "local:iso/debian-12.iso", Size: 600 << 20, Node: "pve1"}}
	s.Guests = []pvesim.GuestSpec{
		{VMID: 100, Type: "qemu", Node: "pve1", Running: true, Config: "cores: 2\nmemory: 2048\nname: web\nballoon: 0\n" +
			"net0: virtio=BC:24:11:00:00:01,bridge=vmbr0\nscsi0: local-lvm:vm-100-disk-0,size=8G\n" +
			"smbios1: uuid=6f1b2c3d-0000-4000-8000-000000000100\ntags: proxops\n"},
		{VMID: 101, Type: "qemu", Node: "pve2", Config: "cores: 1\nmemory: 1024\nname: ci-runner\nargs: -no-hpet\n" +
			"ciuser: ops\ncipassword: " + ciPassword + "\nsshkeys: " + pveformat.EncodeSSHKeys([]string{demoKeyMain, demoKeyBackup}) + "\n" +
			"ide2: local-lvm:vm-101-cloudinit,media=cdrom\nnet0: virtio=BC:24:11:00:00:02,bridge=vmbr0\nscsi0: local-lvm:vm-101-disk-0,size=16G\n"},
		{VMID: 102, Type: "qemu", Node: "pve2", Config: "cores: 1\nmemory: 512\nname: stray\n" +
			"sshkeys: " + pveformat.EncodeSSHKeys([]string{demoKeyMain, strayKey}) + "\n" +
			"net0: virtio=BC:24:11:00:00:03,bridge=vmbr0\nscsi0: local-lvm:vm-102-disk-0,size=4G\n"},
		{VMID: 200, Type: "lxc", Node: "pve1", Config: "cores: 1\nmemory: 512\nhostname: cache\ncpuunits: 512\n" +
			"net0: name=eth0,bridge=vmbr0,hwaddr=BC:24:11:00:02:00,type=veth\nrootfs: local-lvm:vm-200-disk-0,size=4G\n"},
	}
	return s
}

// recordOwned writes the ownership record the planner would have written for a managed guest.
func (e *env) recordOwned(vmid int, ref, node, fingerprint string) {
	e.t.Helper()
	key, _ := bus.OwnedKey(cluster, vmid)
	m, err := wire.OwnedGuestToProto(wire.OwnedGuest{Cluster: cluster, Owned: planOwned(vmid, ref, node, fingerprint)})
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.admin.PutProto(testContext(e.t), bus.BucketOwned, key, m); err != nil {
		e.t.Fatal(err)
	}
}

func planOwned(vmid int, ref, node, fingerprint string) plan.Owned {
	return plan.Owned{VMID: vmid, Ref: ref, Node: node, Fingerprint: fingerprint}
}

// Gap reports follow the inventories the executors publish: a report per cluster covering managed and
// unmanaged guests, published again only when the set of gaps changes, and shown by the status service.
func TestGapReportsFollowInventoriesIntoTheStatusReport(t *testing.T) {
	e := newEnv(t, labSpec())
	e.recordOwned(100, "VM/frontend", "pve1", "uuid=6f1b2c3d-0000-4000-8000-000000000100")
	e.startExecutor("pve1")
	e.startExecutor("pve2")
	e.startAdopter(&secrets.AgeKeys{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	statusCfg := status.Config{Bus: e.connect("status"), Registry: prometheus.NewRegistry(), Listener: ln, Logger: testLogger(t)}
	e.run("status", func(ctx context.Context) error { return status.Run(ctx, statusCfg) })

	e.observe("pve1")
	e.observe("pve2")
	want := []string{
		"100 VM/frontend balloon=0 (managed)",
		"200 LXC/cache cpuunits=512",
		"101 VM/ci-runner args=-no-hpet",
	}
	var seq uint64
	testkit.Eventually(t, 20*time.Second, "a gap report of both nodes", func() bool {
		rep, s, ok := e.gapReport()
		seq = s
		return ok && slices.Equal(gapKeys(rep), want)
	})

	// The status service shows the gaps.
	testkit.Eventually(t, 20*time.Second, "the gaps in /status/lab", func() bool {
		resp, err := http.Get("http://" + ln.Addr().String() + "/status/" + cluster)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		var doc struct {
			Report struct {
				Gaps []struct {
					VMID    int    `json:"vmid"`
					Key     string `json:"key"`
					Managed bool   `json:"managed"`
				} `json:"gaps"`
			} `json:"report"`
		}
		if json.Unmarshal(body, &doc) != nil {
			return false
		}
		g := doc.Report.Gaps
		return len(g) == 3 && g[0].Managed && g[2].VMID == 101 && g[2].Key == "args"
	})

	// The same inventory again publishes nothing new; a new unmodelled key does.
	e.observe("pve2")
	e.inventoriesHandled()
	if _, s, _ := e.gapReport(); s != seq {
		t.Fatalf("an unchanged set of gaps was published again (sequence %d → %d)", seq, s)
	}
	if err := e.sim.SetConfig(102, "hookscript", "local:snippets/hook.pl"); err != nil {
		t.Fatal(err)
	}
	e.observe("pve2")
	testkit.Eventually(t, 20*time.Second, "the new gap", func() bool {
		rep, _, _ := e.gapReport()
		return slices.Contains(gapKeys(rep), "102 VM/stray hookscript=local:snippets/hook.pl")
	})
}

// A container with an unconfined AppArmor profile (a raw lxc.* key, which GET …/pending leaves out) is seen:
// the key is a gap, and the setting is a security warning in /status, on the page, in the text of proxops
// status and in proxops_security_warnings; so are the VM's raw QEMU arguments.
func TestUnconfinedContainerIsASecurityWarningInStatusAndMetrics(t *testing.T) {
	spec := labSpec()
	spec.Guests[3].Config += "lxc.apparmor.profile: unconfined\n"
	e := newEnv(t, spec)
	e.startExecutor("pve1")
	e.startExecutor("pve2")
	e.startAdopter(&secrets.AgeKeys{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	statusCfg := status.Config{Bus: e.connect("status"), Registry: reg, Listener: ln, Logger: testLogger(t)}
	e.run("status", func(ctx context.Context) error { return status.Run(ctx, statusCfg) })
	e.observe("pve1")
	e.observe("pve2")
	testkit.Eventually(t, 20*time.Second, "the raw key as a gap", func() bool {
		rep, _, ok := e.gapReport()
		return ok && slices.Contains(gapKeys(rep), "200 LXC/cache lxc.apparmor.profile=unconfined") && len(rep.Security) == 2
	})
	get := func(path string) string {
		resp, err := http.Get("http://" + ln.Addr().String() + path)
		if err != nil {
			return ""
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return string(body)
	}
	var doc struct {
		Report struct {
			Counters struct {
				SecurityWarnings int `json:"security_warnings"`
			} `json:"counters"`
			SecurityWarnings []struct {
				VMID  int    `json:"vmid"`
				Key   string `json:"key"`
				Value string `json:"value"`
				Why   string `json:"why"`
			} `json:"security_warnings"`
		} `json:"report"`
	}
	testkit.Eventually(t, 20*time.Second, "the security warnings in /status/lab", func() bool {
		return json.Unmarshal([]byte(get("/status/"+cluster)), &doc) == nil && doc.Report.Counters.SecurityWarnings == 2
	})
	w := doc.Report.SecurityWarnings
	if len(w) != 2 || w[0].VMID != 200 || w[0].Key != "lxc.apparmor.profile" || w[0].Value != "unconfined" ||
		!strings.Contains(w[0].Why, "AppArmor") || w[1].VMID != 101 || w[1].Key != "args" {
		t.Errorf("security warnings = %+v", w)
	}
	if page := get("/"); !strings.Contains(page, `data-security-warning="LXC/cache:lxc.apparmor.profile"`) {
		t.Errorf("the page does not show the warning:\n%s", page)
	}
	if m := get("/metrics"); !strings.Contains(m, `proxops_security_warnings{cluster="lab"} 2`) {
		t.Errorf("metrics lack proxops_security_warnings{cluster=\"lab\"} 2:\n%s", m)
	}
	// proxops status prints the report it reads from the status bucket.
	m := wire.NewClusterStatusMessage()
	if _, err := e.admin.GetProto(testContext(t), bus.BucketStatus, cluster, m); err != nil {
		t.Fatal(err)
	}
	st, err := wire.ClusterStatusFromProto(m)
	if err != nil {
		t.Fatal(err)
	}
	var text strings.Builder
	if err := render.StatusText(&text, render.StatusView{Clusters: []report.ClusterStatus{st}}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text.String(), "  security: LXC/cache pve1/200 lxc.apparmor.profile=unconfined: the container runs without an AppArmor profile\n") {
		t.Errorf("proxops status text lacks the warning:\n%s", text.String())
	}
}

// demoSecrets reads the throwaway demo secrets file and its key.
func demoSecrets(t *testing.T) ([]byte, *secrets.AgeKeys) {
	t.Helper()
	dir := filepath.Join(testcorpus.Dir("qemu-server"), "..", "..", "..", "internal", "secrets", "testdata", "demo")
	enc, err := os.ReadFile(filepath.Join(dir, "secrets.sops.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	keyText, err := os.ReadFile(filepath.Join(dir, "demo.agekey"))
	if err != nil {
		t.Fatal(err)
	}
	keys, err := secrets.ParseAgeKeys("demo.agekey", keyText)
	if err != nil {
		t.Fatal(err)
	}
	return enc, keys
}

// storeTree stores a repository snapshot and returns its name.
func (e *env) storeTree(files map[string]string) string {
	e.t.Helper()
	snap := event.TreeSnapshot{}
	for p, c := range files {
		snap.Files = append(snap.Files, event.File{Path: p, Content: []byte(c)})
	}
	snap.Named()
	if _, err := treestore.PutPreview(testContext(e.t), e.cli(), snap); err != nil {
		e.t.Fatal(err)
	}
	return snap.Tree
}

func (e *env) adopt(req wire.AdoptRequest) (adopt.Result, error) {
	subject, _ := bus.AdoptSubject(req.Cluster)
	_, res, err := wire.DecodeAdoptResult(testContext(e.t), func(ctx context.Context, into proto.Message) error {
		return e.cli().Request(ctx, subject, wire.AdoptRequestToProto(req), into)
	})
	return res, err
}

// An adoption request observes every allowed node through its executors and answers with the manifests; it
// reads PVE only. With a SOPS-backed cluster, live keys that are all in the secrets file become
// ssh-key-refs; nothing that carries a secret (not the manifests, the reply, a gap report, nor any message on
// any stream) holds a key or the password.
func TestAdoptionOverNATSReadsOnlyAndNeverCarriesSecrets(t *testing.T) {
	e := newEnv(t, labSpec())
	enc, keys := demoSecrets(t)
	e.startExecutor("pve1")
	e.startExecutor("pve2")
	e.startAdopter(keys)
	tree := e.storeTree(map[string]string{
		"clusters/lab/config.yaml":       "pve:\n  clusters:\n    lab:\n      base-url: " + e.srv.URL + "\n      nodes: [pve1, pve2]\n      secrets-file: secrets.sops.yaml\n",
		"clusters/lab/resources.yaml":    "resources: []\n",
		"clusters/lab/secrets.sops.yaml": string(enc),
	})
	e.sim.ResetLog()
	res, err := e.adopt(wire.AdoptRequest{Cluster: cluster, RequestID: "r1", Tree: tree})
	if err != nil {
		t.Fatalf("adopt: %v", err)
	}
	var paths []string
	for _, m := range res.Manifests {
		paths = append(paths, m.Path)
	}
	want := "iso/lab/debian-12-iso.yaml lxc/lab/cache.yaml vm/lab/ci-runner.yaml vm/lab/stray.yaml vm/lab/web.yaml"
	if got := strings.Join(paths, " "); got != want {
		t.Errorf("manifests %s, want %s", got, want)
	}
	for _, m := range res.Manifests {
		switch m.Path {
		case "vm/lab/ci-runner.yaml":
			if !strings.Contains(string(m.Content), "ssh-key-refs:\n      - cloud-init.ssh-keys.backup\n      - cloud-init.ssh-keys.main\n") {
				t.Errorf("ci-runner's keys are not secret references:\n%s", m.Content)
			}
		case "vm/lab/stray.yaml":
			if !strings.Contains(string(m.Content), "ssh-keys:\n      - '*'\n") {
				t.Errorf("stray's keys (one not in the secrets file) are not left to PVE:\n%s", m.Content)
			}
		}
	}
	for _, r := range e.sim.Requests() {
		if r.Method != http.MethodGet {
			t.Errorf("adoption sent %s %s to PVE", r.Method, r.Path)
		}
	}

	// Unknown clusters and nodes outside the allowlist are refused with what is known.
	if _, err := e.adopt(wire.AdoptRequest{Cluster: "prod", Tree: tree}); err == nil || !strings.Contains(err.Error(), "known: [lab]") {
		t.Errorf("unknown cluster: %v", err)
	}
	if _, err := e.adopt(wire.AdoptRequest{Cluster: cluster, Tree: tree, Nodes: []string{"pve9"}}); err == nil ||
		!strings.Contains(err.Error(), "allowed: [pve1 pve2]") {
		t.Errorf("node outside the allowlist: %v", err)
	}

	// Let the gap reports settle, then read every stream back.
	e.observe("pve1")
	e.observe("pve2")
	testkit.Eventually(t, 20*time.Second, "a gap report", func() bool { _, _, ok := e.gapReport(); return ok })
	var all strings.Builder
	for _, m := range res.Manifests {
		all.Write(m.Content)
	}
	all.WriteString(render.AdoptionText(render.Adoption{Result: res, CompositionFile: "clusters/lab/resources.yaml"}))
	js, err := render.AdoptionJSONBytes(render.Adoption{Result: res})
	if err != nil {
		t.Fatal(err)
	}
	all.Write(js)
	// (PROXOPS_OPS, a work queue, cannot be browsed; operations are in the results and dead letters.)
	for _, stream := range []string{bus.StreamRepo, bus.StreamPlans, bus.StreamResults, bus.StreamInventory,
		bus.StreamGaps, bus.StreamStatus, bus.StreamDLQ, "KV_" + bus.BucketOwned, "KV_" + bus.BucketStatus, "OBJ_" + bus.ObjectBlobs} {
		err := e.admin.ReadStream(testContext(t), stream, ">", 1, func(m *bus.Message) error {
			all.Write(m.Data)
			return nil
		})
		if err != nil && !errors.Is(err, bus.ErrNotFound) {
			t.Fatalf("read %s: %v", stream, err)
		}
	}
	if !strings.Contains(all.String(), "ci-runner") || !strings.Contains(all.String(), "sha256:") {
		t.Fatal("the streams read back hold neither the inventories nor the key digests: the search proves nothing")
	}
	for _, secret := range []string{ciPassword, "AAAAIIWhx1Yv", "AAAAIJsps1rI", "StrayStray", "demo-cipassword-Kx4pT8vN"} {
		if strings.Contains(all.String(), secret) {
			t.Errorf("%q found in adoption output or on a stream", secret)
		}
	}
}

// Under a deployment's per-service NATS users the adopter does all of its work with its own permissions (a
// denied call would be a timeout): it reads the inventories, publishes gap reports, serves the CLI's
// adoption request and observes through the executors. A restarted adopter does not publish a report that
// is already on the stream.
func TestAdopterWorksUnderItsOwnNATSPermissions(t *testing.T) {
	e := newEnvUsers(t, labSpec(), true)
	e.startExecutor("pve1")
	e.startExecutor("pve2")
	stop := e.startAdopter(&secrets.AgeKeys{})
	e.observe("pve1")
	e.observe("pve2")
	var seq uint64
	testkit.Eventually(t, 20*time.Second, "a gap report of both nodes", func() bool {
		rep, s, ok := e.gapReport()
		seq = s
		return ok && len(rep.Gaps) == 3
	})
	tree := e.storeTree(map[string]string{
		"clusters/lab/config.yaml":    "pve:\n  clusters:\n    lab:\n      base-url: " + e.srv.URL + "\n      nodes: [pve1, pve2]\n",
		"clusters/lab/resources.yaml": "resources: []\n",
	})
	res, err := e.adopt(wire.AdoptRequest{Cluster: cluster, RequestID: "r2", Tree: tree})
	if err != nil || len(res.Manifests) != 5 {
		t.Fatalf("adoption under the cli's and the adopter's permissions: %d manifests, %v", len(res.Manifests), err)
	}

	stop()
	e.startAdopter(&secrets.AgeKeys{})
	e.observe("pve1")
	e.observe("pve2")
	e.inventoriesHandled()
	if _, s, _ := e.gapReport(); s != seq {
		t.Fatalf("a restarted adopter published an unchanged report again (sequence %d → %d)", seq, s)
	}
}
