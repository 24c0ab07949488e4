package wire_test

import (
	"context"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/proxops/proxops/internal/bus"
	"github.com/proxops/proxops/internal/diag"
	"github.com/proxops/proxops/internal/event"
	inventoryv1 "github.com/proxops/proxops/internal/gen/proxops/inventory/v1"
	planv1 "github.com/proxops/proxops/internal/gen/proxops/plan/v1"
	repov1 "github.com/proxops/proxops/internal/gen/proxops/repo/v1"
	"github.com/proxops/proxops/internal/inventory"
	"github.com/proxops/proxops/internal/plan"
	"github.com/proxops/proxops/internal/wire"
)

// roundTrip marshals a converted message to bytes and back, as the bus does.
func roundTrip(t *testing.T, m proto.Message, into proto.Message) {
	t.Helper()
	data, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if err := proto.Unmarshal(data, into); err != nil {
		t.Fatal(err)
	}
}

func sampleOperation() plan.Operation {
	return plan.Operation{
		ID: "op-3", RunID: "run-1", PlanID: "plan-abc", Cluster: "lab", Node: "pve1", VMID: 101,
		GuestType: inventory.QEMU, Ref: "VM/web-01", Action: plan.ActionConfigure,
		Values:     []plan.KV{{Key: "memory", Value: "4096"}, {Key: "sshkeys", SecretRefs: []string{"cloud-init.ssh-keys.main"}}},
		Delete:     []string{"ide2"},
		Params:     []plan.KV{{Key: "timeout", Value: "60"}},
		SourceVMID: 9000, Storage: "local-lvm", SecretsDigest: "sha256:0f4c",
		BaseURL: "https://pve.example.invalid:8006",
		Precondition: plan.Precondition{ExpectAbsent: true, Digest: "d1", Expect: []plan.KV{{Key: "memory", Value: "2048"}},
			Fingerprint: "uuid=x", ExpectTag: true},
		DependsOn: []string{"op-1", "op-2"}, Reason: "VM/web-01: config drift (memory)",
		Changes: []plan.Change{{Field: "memory", Before: "2048", After: "4096"}},
	}
}

func TestOperationRoundTrips(t *testing.T) {
	cases := map[string]plan.Operation{
		"guest":    sampleOperation(),
		"artifact": {ID: "op-9", Cluster: "lab", Node: "pve1", Ref: "ISO/debian", Action: plan.ActionDownload, Storage: "local"},
	}
	for name, op := range cases {
		t.Run(name, func(t *testing.T) {
			m, err := wire.OperationToProto(op)
			if err != nil {
				t.Fatal(err)
			}
			var back planv1.Operation
			roundTrip(t, m, &back)
			got, err := wire.OperationFromProto(&back)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(op, got); diff != "" {
				t.Fatalf("operation changed in transit (-sent +received):\n%s", diff)
			}
		})
	}
}

func TestResultRoundTrips(t *testing.T) {
	r := plan.Result{
		RunID: "run-1", OpID: "op-3", PlanID: "plan-abc", Cluster: "lab", Node: "pve1", VMID: 101,
		GuestType: inventory.LXC, Ref: "CT/dns", Action: plan.ActionClone, Status: plan.StatusFailed,
		Message: "clone failed", UPID: "UPID:pve1:0001:0002:0003:qmclone:101:root@pam!proxops:",
		TaskLog: []string{"line 1", "line 2"}, ErrorClass: plan.ErrorRetryable, AlreadyDone: true,
		Fingerprint: "hwaddr=aa", Attempt: 3, Executor: "pve1-a",
		At: time.Date(2025, 3, 4, 5, 6, 7, 8000, time.UTC), Elapsed: 1500 * time.Millisecond,
	}
	m, err := wire.ResultToProto(r)
	if err != nil {
		t.Fatal(err)
	}
	var back planv1.OperationResult
	roundTrip(t, m, &back)
	got, err := wire.ResultFromProto(&back)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(r, got); diff != "" {
		t.Fatalf("result changed in transit (-sent +received):\n%s", diff)
	}
	// A successful result carries no error class.
	ok := plan.Result{OpID: "op-1", Action: plan.ActionStart, Status: plan.StatusSucceeded, VMID: 100, GuestType: inventory.QEMU}
	m, err = wire.ResultToProto(ok)
	if err != nil {
		t.Fatal(err)
	}
	got, err = wire.ResultFromProto(m)
	if err != nil || got.ErrorClass != plan.ErrorNone {
		t.Fatalf("error class %q, %v", got.ErrorClass, err)
	}
}

func TestDiagnosticsRoundTrip(t *testing.T) {
	l := diag.List{
		{Severity: diag.Error, File: "vm/a.yaml", Line: 3, Column: 5, Ref: "VM/a", Field: "spec.memory", Message: "bad"},
		{Severity: diag.Warning, Message: "unknown field"},
	}
	ms, err := wire.DiagnosticsToProto(l)
	if err != nil {
		t.Fatal(err)
	}
	for i, m := range ms {
		var back planv1.Diagnostic
		roundTrip(t, m, &back)
		ms[i] = &back
	}
	got, err := wire.DiagnosticsFromProto(ms)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(l, got); diff != "" {
		t.Fatalf("diagnostics changed (-sent +received):\n%s", diff)
	}
	one, err := wire.DiagnosticFromProto(ms[0])
	if err != nil || one != l[0] {
		t.Fatalf("single diagnostic: %v, %v", one, err)
	}
}

func TestNodeInventoryRoundTrips(t *testing.T) {
	n := wire.NodeInventory{
		RequestID: "obs-1", ObservedAt: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC), Error: "GET /nodes/pve1/qemu: 503 Service Unavailable",
		ErrorClass: "retryable",
		Node: inventory.Node{
			Cluster: "lab", Node: "pve1", PVEVersion: "9.1.1",
			Guests: []inventory.Guest{
				{VMID: 100, Type: inventory.QEMU, Node: "pve1", Name: "web", Status: "running", QMPStatus: "running",
					Tags: "proxops;web", Digest: "abc", HAManaged: true, Lock: "backup",
					Config: []inventory.Entry{
						{Key: "memory", Value: "2048", HasValue: true, Pending: "4096", HasPending: true},
						{Key: "ide2", Value: "none", HasValue: true, Delete: 1},
						{Key: "net1", Pending: "virtio", HasPending: true},
					},
					CloudInitDrive: true,
					CloudInit: []inventory.Entry{
						{Key: "ciuser", Value: "root", HasValue: true, Pending: "deploy", HasPending: true},
						{Key: "nameserver", Delete: 1},
					},
					Firewall: &inventory.Firewall{Options: map[string]string{"enable": "1", "policy_in": "DROP"},
						Rules:       []map[string]string{{"type": "in", "action": "ACCEPT", "macro": "SSH", "enable": "1"}, {"type": "group", "action": "web", "enable": "0"}},
						RulesDigest: "d1",
						IPSets:      []inventory.FirewallIPSet{{Name: "office", Comment: "c", Entries: []inventory.FirewallIPSetEntry{{CIDR: "192.0.2.0/24"}, {CIDR: "192.0.2.9", NoMatch: true, Comment: "printer"}}}},
						Aliases:     []inventory.FirewallAlias{{Name: "gw", CIDR: "192.0.2.1", Comment: "router"}}}},
				{VMID: 200, Type: inventory.LXC, Node: "pve1", Name: "dns", Status: "stopped", Template: true},
			},
			Storages:          []inventory.Storage{{ID: "local", Type: "dir", Content: []string{"iso", "vztmpl"}, Active: true, Enabled: true, Total: 100, Avail: 50}},
			Volumes:           []inventory.Volume{{Storage: "local", Volid: "local:iso/debian.iso", Content: "iso", Format: "iso", Size: 123, Parent: ""}, {Storage: "local", Volid: "local:100/vm-100-disk-0.qcow2", Content: "images", VMID: 100}},
			ListedStorages:    []string{"local"},
			TagsCaseSensitive: true,
			BackupJobs: []inventory.BackupJob{{ID: "nightly", Comment: "Nightly [proxops]",
				Options: map[string]string{"schedule": "21:00", "all": "1", "exclude": "100,101"}}},
			BackupJobsObserved: true,
			ClusterFirewall: &inventory.ClusterFirewall{Groups: []inventory.FirewallGroup{{Name: "web", Rules: []map[string]string{{"type": "in", "action": "ACCEPT", "enable": "1"}}}},
				IPSets: []string{"management"}, Aliases: []string{"lan"}},
			PoolsObserved: true,
			Pools:         []inventory.Pool{{ID: "web", Comment: "proxops", Members: []int{100}}},
			HA: &inventory.HA{RulesRead: true,
				Resources: []inventory.HAResource{{SID: "vm:100", State: "started", Comment: "web [proxops]", MaxRestart: 2, MaxRelocate: 1, Failback: true}},
				Rules: []inventory.HARule{{ID: "web-on-a", Type: "node-affinity", Resources: []string{"vm:100"}, Nodes: []string{"pve1:2", "pve2"},
					Strict: true, Comment: "pin"}}},
		},
		ClusterNodes: []string{"pve1", "pve2"},
		HARulesRead:  true,
		HARules: []inventory.HARule{
			{ID: "pin", Type: "node-affinity", Resources: []string{"vm:100"}, Nodes: []string{"pve1:2", "pve2"}, Strict: true},
			{ID: "apart", Type: "resource-affinity", Resources: []string{"vm:100", "ct:200"}, Affinity: "negative", Disable: true, Comment: "x"},
		},
		HAResources: map[string]string{"vm:100": "started"},
	}
	m, err := wire.NodeInventoryToProto(n)
	if err != nil {
		t.Fatal(err)
	}
	var back inventoryv1.NodeInventory
	roundTrip(t, m, &back)
	got, err := wire.NodeInventoryFromProto(&back)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(n, got); diff != "" {
		t.Fatalf("inventory changed in transit (-sent +received):\n%s", diff)
	}
	// A guest that claims another node is refused.
	n.Node.Guests[0].Node = "pve2"
	if _, err := wire.NodeInventoryToProto(n); err == nil || !strings.Contains(err.Error(), "pve2") {
		t.Fatalf("guest on another node: %v", err)
	}
}

func TestObserveRequestRoundTrips(t *testing.T) {
	r := wire.ObserveRequest{Cluster: "lab", Node: "pve1", RequestID: "r1", ContentStorages: []string{"local", "nfs"}, AllContent: true,
		ListNodes: true, BaseURL: "https://pve.example.invalid:8006", FirewallVMIDs: []int{100, 101}, AllFirewalls: true, ClusterFirewall: true,
		HA: true, Pools: true, BackupJobs: true}
	var back inventoryv1.ObserveRequest
	roundTrip(t, wire.ObserveRequestToProto(r), &back)
	got, err := wire.ObserveRequestFromProto(&back)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(r, got); diff != "" {
		t.Fatalf("(-sent +received):\n%s", diff)
	}
}

func TestRepoEventsRoundTrip(t *testing.T) {
	rc := event.RepoChanged{Repo: "https://git.example/infra.git", Branch: "main", Commit: "abc", Tree: "t1",
		Trigger: event.TriggerDrift, EventID: event.DriftEventID("https://git.example/infra.git", "abc", 7),
		RequestID: "r1", Clusters: []string{"lab"}, DryRun: true, Subject: "Bump memory", MoveMisplaced: true,
		Rollback: &event.Rollback{Guest: "VM/web", Snapshot: "proxops-0123456789ab"}}
	m, err := wire.RepoChangedToProto(rc)
	if err != nil {
		t.Fatal(err)
	}
	var back repov1.RepoChanged
	roundTrip(t, m, &back)
	got, err := wire.RepoChangedFromProto(&back)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(rc, got); diff != "" {
		t.Fatalf("RepoChanged (-sent +received):\n%s", diff)
	}

	rr := event.ReconcileRequest{RequestID: "r1", Clusters: []string{"lab", "prod"}, DryRun: true, Tree: "t2", RequestedBy: "cli:alice@host", MoveMisplaced: true,
		Rollback: &event.Rollback{Guest: "web"}}
	var backRR repov1.ReconcileRequest
	roundTrip(t, wire.ReconcileRequestToProto(rr), &backRR)
	gotRR, err := wire.ReconcileRequestFromProto(&backRR)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(rr, gotRR); diff != "" {
		t.Fatalf("ReconcileRequest (-sent +received):\n%s", diff)
	}

	ts := event.TreeSnapshot{Commit: "abc", Tree: "t1", Files: []event.File{{Path: "clusters/lab/config.yaml", Content: []byte("base-url: x\n")}, {Path: "vm/a.yaml", Content: []byte("kind: VM\n")}}}
	var backTS repov1.TreeSnapshot
	roundTrip(t, wire.TreeSnapshotToProto(ts), &backTS)
	gotTS, err := wire.TreeSnapshotFromProto(&backTS)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(ts, gotTS); diff != "" {
		t.Fatalf("TreeSnapshot (-sent +received):\n%s", diff)
	}
}

func TestUnknownOrUnspecifiedEnumsAreErrors(t *testing.T) {
	cases := []struct {
		name string
		conv func() error
		want string
	}{
		{"unspecified action", func() error {
			_, err := wire.OperationFromProto(&planv1.Operation{OpId: "op-1"})
			return err
		}, "action: unspecified"},
		{"unknown action", func() error {
			_, err := wire.OperationFromProto(&planv1.Operation{OpId: "op-1", Action: 99})
			return err
		}, "action: unknown value 99"},
		{"guest without type", func() error {
			_, err := wire.OperationFromProto(&planv1.Operation{OpId: "op-1", Vmid: 100, Action: planv1.Action_ACTION_START})
			return err
		}, "guest type: unspecified"},
		{"unknown domain action", func() error {
			_, err := wire.OperationToProto(plan.Operation{ID: "op-1", Action: "reboot"})
			return err
		}, "action: unknown value reboot"},
		{"unspecified status", func() error {
			_, err := wire.ResultFromProto(&planv1.OperationResult{OpId: "op-1", Action: planv1.Action_ACTION_START})
			return err
		}, "status: unspecified"},
		{"unknown error class", func() error {
			_, err := wire.ResultFromProto(&planv1.OperationResult{OpId: "op-1", Action: planv1.Action_ACTION_START,
				Status: planv1.ResultStatus_RESULT_STATUS_FAILED, ErrorClass: 7})
			return err
		}, "error class: unknown value 7"},
		{"unspecified severity", func() error {
			_, err := wire.DiagnosticFromProto(&planv1.Diagnostic{Message: "x"})
			return err
		}, "severity: unspecified"},
		{"unknown severity", func() error {
			_, err := wire.DiagnosticToProto(diag.Diagnostic{Severity: 9})
			return err
		}, "severity: unknown value"},
		{"unspecified guest type", func() error {
			_, err := wire.NodeInventoryFromProto(&inventoryv1.NodeInventory{Guests: []*inventoryv1.Guest{{Vmid: 100}}})
			return err
		}, "guest 100: type: unspecified"},
		{"unspecified trigger", func() error {
			_, err := wire.RepoChangedFromProto(&repov1.RepoChanged{EventId: "r@c"})
			return err
		}, "trigger: unspecified"},
		{"unknown trigger", func() error {
			_, err := wire.RepoChangedToProto(event.RepoChanged{Trigger: "cron"})
			return err
		}, "trigger: unknown value cron"},
		{"wrong message type", func() error {
			_, err := wire.OperationFromProto(&planv1.OperationResult{})
			return err
		}, "want *planv1.Operation"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.conv()
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error containing %q", err, c.want)
			}
		})
	}
}

func TestOperationTravelsOverTheBus(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	srv, err := bus.StartServer(ctx, bus.ServerConfig{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	b, err := srv.Connect(bus.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = b.Close() }()
	if _, err := b.Provision(ctx, bus.ProvisionConfig{}); err != nil {
		t.Fatal(err)
	}
	op := sampleOperation()
	m, err := wire.OperationToProto(op)
	if err != nil {
		t.Fatal(err)
	}
	subject, _ := bus.OpSubject(op.Cluster, op.Node)
	if _, err := b.Publish(ctx, subject, m, bus.WithMsgID(op.RunID+"."+op.ID)); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Publish(ctx, subject, wrapperspb.String("not an operation")); err != nil {
		t.Fatal(err)
	}
	msgs, err := b.LastPerSubject(ctx, bus.StreamOps, subject)
	if err == nil {
		t.Fatalf("a work queue was read without acknowledgement: %d messages", len(msgs))
	}
	durable, _ := bus.ExecutorConsumer(op.Cluster, op.Node)
	if err := b.EnsureConsumer(ctx, bus.ConsumerConfig{Stream: bus.StreamOps, Durable: durable, Filter: subject}); err != nil {
		t.Fatal(err)
	}
	type outcome struct {
		op  plan.Operation
		err error
	}
	got := make(chan outcome, 2)
	cctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- b.Consume(cctx, bus.StreamOps, durable, bus.ConsumeOptions{MaxWait: time.Second}, func(ctx context.Context, d *bus.Delivery) error {
			o, err := wire.DecodeOperation(ctx, d.Decode)
			got <- outcome{o, err}
			return bus.Terminal(err)
		})
	}()
	first, second := <-got, <-got
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if first.err != nil {
		t.Fatal(first.err)
	}
	if diff := cmp.Diff(op, first.op); diff != "" {
		t.Fatalf("(-sent +received):\n%s", diff)
	}
	if second.err == nil || !strings.Contains(second.err.Error(), "google.protobuf.StringValue") {
		t.Fatalf("a StringValue decoded as an operation: %v", second.err)
	}
}

// TestOnlyWireImportsGeneratedCode guards the layering: protobuf is the wire, not the model.
func TestOnlyWireImportsGeneratedCode(t *testing.T) {
	root := filepath.Join("..", "..")
	const gen = "github.com/proxops/proxops/internal/gen/"
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", "testdata", "gen":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if strings.HasPrefix(rel, "internal/wire/") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if strings.HasPrefix(p, gen) {
				t.Errorf("%s imports %s: only internal/wire may import generated code", rel, p)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
