package bus_test

import (
	"context"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats-server/v2/server"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/proxops/proxops/internal/bus"
)

var update = flag.Bool("update", false, "rewrite deploy/nats from the Go permissions")

const deployDir = "../../deploy/nats"

func TestDeployFilesMatchGoPermissions(t *testing.T) {
	files, err := bus.DeployFiles(bus.ExampleDeploy())
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	slices.Sort(names)
	if *update {
		if err := os.MkdirAll(deployDir, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, name := range names {
			if err := os.WriteFile(filepath.Join(deployDir, name), []byte(files[name]), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, name := range names {
		got, err := os.ReadFile(filepath.Join(deployDir, name))
		if err != nil {
			t.Fatalf("%v (run go test ./internal/bus -run TestDeployFiles -update)", err)
		}
		if diff := cmp.Diff(files[name], string(got)); diff != "" {
			t.Errorf("deploy/nats/%s drifted from the Go permissions (-generated +committed); run go test ./internal/bus -run TestDeployFiles -update:\n%s", name, diff)
		}
	}
}

// deployUsers loads deploy/nats/users.conf as nats-server parses it, with a password per user from the
// environment.
func deployUsers(t *testing.T) []bus.User {
	t.Helper()
	want, err := bus.ServiceUsers(bus.ExampleDeploy().Topology)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range want {
		t.Setenv(bus.PasswordVariable(u.Name), "pw-"+u.Name)
	}
	opts, err := server.ProcessConfigFile(filepath.Join(deployDir, "users.conf"))
	if err != nil {
		t.Fatalf("parse users.conf: %v", err)
	}
	var users []bus.User
	for _, u := range opts.Users {
		p := bus.Permissions{}
		if u.Permissions != nil {
			if u.Permissions.Publish != nil {
				p.Publish = u.Permissions.Publish.Allow
			}
			if u.Permissions.Subscribe != nil {
				p.Subscribe = u.Permissions.Subscribe.Allow
			}
			p.AllowResponses = u.Permissions.Response != nil
		}
		users = append(users, bus.User{Name: u.Username, Password: u.Password, Permissions: p})
	}
	// The parsed file says exactly what the Go functions say.
	var fromGo []bus.User
	for _, u := range want {
		fromGo = append(fromGo, bus.User{Name: u.Name, Password: "pw-" + u.Name, Permissions: u.Permissions})
	}
	if diff := cmp.Diff(fromGo, users); diff != "" {
		t.Fatalf("users.conf as parsed by nats-server differs from the Go permissions (-go +parsed):\n%s", diff)
	}
	return users
}

// connectAs opens an in-process connection with a deployment user's credentials.
func connectAs(t *testing.T, srv *bus.Server, user string) *bus.Bus {
	t.Helper()
	return connectWithTimeout(t, srv, user, 5*time.Second)
}

// connectDenied opens a connection with a short API timeout for calls that must be denied: a denied
// JetStream call is a timeout.
func connectDenied(t *testing.T, srv *bus.Server, user string) *bus.Bus {
	t.Helper()
	return connectWithTimeout(t, srv, user, 750*time.Millisecond)
}

func connectWithTimeout(t *testing.T, srv *bus.Server, user string, timeout time.Duration) *bus.Bus {
	t.Helper()
	b, err := srv.ConnectUser(user, "pw-"+user, bus.Options{APITimeout: timeout, RequestTimeout: 10 * time.Second})
	if err != nil {
		t.Fatalf("connect as %s: %v", user, err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

func TestServiceCredentialsAllowTheirWorkAndNothingElse(t *testing.T) {
	users := deployUsers(t)
	env := startEnv(t, bus.ServerConfig{Users: users}, bus.ProvisionConfig{})
	ctx := testContext(t)
	admin := env.bus

	watcher := connectAs(t, env.server, "watcher")
	planner := connectAs(t, env.server, "planner")
	exec1 := connectAs(t, env.server, "executor_lab_pve1")
	adopter := connectAs(t, env.server, "adopter")
	status := connectAs(t, env.server, "status")
	cli := connectAs(t, env.server, "cli")

	// The admin user provisions (a second run: nothing to change).
	if _, err := connectAs(t, env.server, "admin").Provision(ctx, bus.ProvisionConfig{}); err != nil {
		t.Fatalf("admin provision: %v", err)
	}

	// Watcher: stores a tree and announces it.
	if _, err := watcher.PutObjectIfAbsent(ctx, bus.ObjectTrees, "tree1", wrapperspb.String("files")); err != nil {
		t.Fatalf("watcher stores a tree: %v", err)
	}
	if _, err := watcher.Publish(ctx, bus.SubjectRepoChanged, wrapperspb.String("tree1"), bus.WithMsgID("repo@c1")); err != nil {
		t.Fatalf("watcher publishes RepoChanged: %v", err)
	}

	// Planner: consumes RepoChanged through its durable, reads the tree, takes the lease.
	if err := planner.EnsureConsumer(ctx, bus.ConsumerConfig{Stream: bus.StreamRepo, Durable: bus.ConsumerPlannerRepo, Filter: bus.SubjectRepoChanged}); err != nil {
		t.Fatalf("planner ensures its consumer: %v", err)
	}
	got := make(chan string, 1)
	consumeInto(t, planner, bus.StreamRepo, bus.ConsumerPlannerRepo, bus.ConsumeOptions{MaxWait: time.Second}, func(ctx context.Context, d *bus.Delivery) error {
		var v wrapperspb.StringValue
		if err := d.Decode(ctx, &v); err != nil {
			return bus.Terminal(err)
		}
		got <- v.GetValue()
		return nil
	})
	select {
	case v := <-got:
		var tree wrapperspb.StringValue
		if err := planner.GetObject(ctx, bus.ObjectTrees, v, &tree); err != nil {
			t.Fatalf("planner reads the tree: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("planner did not receive RepoChanged")
	}
	lease, err := planner.AcquireLease(ctx, "lab", "planner-1")
	if err != nil {
		t.Fatalf("planner takes the lease: %v", err)
	}
	if err := lease.Renew(ctx); err != nil {
		t.Fatalf("planner renews the lease: %v", err)
	}

	// Executor of lab/pve1: serves observe with a reply above the payload limit (through blobs).
	observe, _ := bus.ObserveSubject("lab", "pve1")
	big := bigValue(t, 2<<20)
	svc, err := exec1.Serve(ctx, observe, bus.QueueExecutors, bus.ServeOptions{}, func(ctx context.Context, r *bus.Request) (proto.Message, error) {
		var req wrapperspb.StringValue
		if err := r.Decode(ctx, &req); err != nil {
			return nil, err
		}
		return big, nil
	})
	if err != nil {
		t.Fatalf("executor serves observe: %v", err)
	}
	t.Cleanup(svc.Stop)
	var inv wrapperspb.BytesValue
	if err := planner.Request(ctx, observe, wrapperspb.String("observe"), &inv); err != nil || len(inv.GetValue()) != len(big.GetValue()) {
		t.Fatalf("planner observes pve1: %d bytes, %v", len(inv.GetValue()), err)
	}

	// Planner dispatches one operation to each of two nodes.
	op1, _ := bus.OpSubject("lab", "pve1")
	op2, _ := bus.OpSubject("lab", "pve2")
	for _, s := range []string{op1, op2} {
		if _, err := planner.Publish(ctx, s, wrapperspb.String("op for "+s), bus.WithMsgID("run1."+s)); err != nil {
			t.Fatalf("planner dispatches to %s: %v", s, err)
		}
	}
	plan, _ := bus.PlanSubject("lab", bus.PlanPlanned)
	if _, err := planner.Publish(ctx, plan, wrapperspb.String("plan")); err != nil {
		t.Fatalf("planner publishes a plan: %v", err)
	}

	// The executor can consume its own node's operations and report results and inventories.
	durable1, _ := bus.ExecutorConsumer("lab", "pve1")
	if err := exec1.EnsureConsumer(ctx, bus.ConsumerConfig{Stream: bus.StreamOps, Durable: durable1, Filter: op1}); err != nil {
		t.Fatalf("executor ensures its own consumer: %v", err)
	}
	ops := make(chan string, 2)
	consumeInto(t, exec1, bus.StreamOps, durable1, bus.ConsumeOptions{MaxWait: time.Second}, func(ctx context.Context, d *bus.Delivery) error {
		var v wrapperspb.StringValue
		if err := d.Decode(ctx, &v); err != nil {
			return bus.Terminal(err)
		}
		ops <- v.GetValue()
		return nil
	})
	select {
	case v := <-ops:
		if v != "op for "+op1 {
			t.Fatalf("executor of pve1 received %q", v)
		}
	case <-ctx.Done():
		t.Fatal("executor did not receive its operation")
	}
	result, _ := bus.ResultSubject("lab", "pve1")
	if _, err := exec1.Publish(ctx, result, wrapperspb.String("succeeded")); err != nil {
		t.Fatalf("executor publishes a result: %v", err)
	}
	invSubj, _ := bus.InventorySubject("lab", "pve1")
	if _, err := exec1.Publish(ctx, invSubj, wrapperspb.String("inventory")); err != nil {
		t.Fatalf("executor publishes an inventory: %v", err)
	}

	// ...but cannot publish a plan,
	exec1 = connectDenied(t, env.server, "executor_lab_pve1")
	before := streamMsgs(t, admin, bus.StreamPlans)
	if _, err := exec1.Publish(ctx, plan, wrapperspb.String("forged plan")); err == nil {
		t.Fatal("an executor published a plan")
	}
	if _, err := exec1.Publish(ctx, op2, wrapperspb.String("forged op")); err == nil {
		t.Fatal("an executor dispatched an operation")
	}
	// ...nor consume another node's operations, whether through a consumer of its own making or the other
	// node's durable.
	durable2, _ := bus.ExecutorConsumer("lab", "pve2")
	if err := exec1.EnsureConsumer(ctx, bus.ConsumerConfig{Stream: bus.StreamOps, Durable: durable2, Filter: op2}); err == nil {
		t.Fatal("executor of pve1 created pve2's consumer")
	}
	if err := exec1.EnsureConsumer(ctx, bus.ConsumerConfig{Stream: bus.StreamOps, Durable: durable1, Filter: op2}); err == nil {
		t.Fatal("executor of pve1 pointed its consumer at pve2's operations")
	}
	if err := admin.EnsureConsumer(ctx, bus.ConsumerConfig{Stream: bus.StreamOps, Durable: durable2, Filter: op2}); err != nil {
		t.Fatal(err)
	}
	stolen := make(chan string, 1)
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	err = exec1.Consume(cctx, bus.StreamOps, durable2, bus.ConsumeOptions{MaxWait: 500 * time.Millisecond}, func(ctx context.Context, d *bus.Delivery) error {
		stolen <- d.Subject()
		return nil
	})
	if err == nil && len(stolen) > 0 {
		t.Fatal("executor of pve1 consumed pve2's operation")
	}
	if n := streamMsgs(t, admin, bus.StreamOps); n != 1 {
		t.Fatalf("work queue holds %d messages, want pve2's operation still there", n)
	}
	if n := streamMsgs(t, admin, bus.StreamPlans); n != before {
		t.Fatalf("plans stream grew from %d to %d", before, n)
	}

	// Adopter: reads the latest inventories and publishes gap reports.
	last, err := adopter.LastPerSubject(ctx, bus.StreamInventory, bus.FilterInventory)
	if err != nil || len(last) != 1 {
		t.Fatalf("adopter reads inventories: %d, %v", len(last), err)
	}
	gap, _ := bus.GapSubject("lab")
	if _, err := adopter.Publish(ctx, gap, wrapperspb.String("gaps")); err != nil {
		t.Fatalf("adopter publishes gaps: %v", err)
	}
	if _, err := connectDenied(t, env.server, "adopter").Publish(ctx, plan, wrapperspb.String("forged")); err == nil {
		t.Fatal("the adopter published a plan")
	}

	// Status: reads plans and results, keeps and publishes the cluster status.
	if err := status.ReadStream(ctx, bus.StreamPlans, bus.FilterPlans, 0, func(*bus.Message) error { return nil }); err != nil {
		t.Fatalf("status reads plans: %v", err)
	}
	if _, err := status.PutProto(ctx, bus.BucketStatus, "lab", wrapperspb.String("converged")); err != nil {
		t.Fatalf("status stores the cluster status: %v", err)
	}
	statusSubj, _ := bus.StatusSubject("lab")
	if _, err := status.Publish(ctx, statusSubj, wrapperspb.String("converged")); err != nil {
		t.Fatalf("status publishes: %v", err)
	}
	if _, err := connectDenied(t, env.server, "status").AcquireLease(ctx, "lab", "status"); err == nil || errors.Is(err, bus.ErrLeaseHeld) {
		t.Fatalf("status took or contended for a plan lease: %v", err)
	}

	// The CLI asks for a reconcile and confirms, but cannot dispatch.
	if _, err := cli.Publish(ctx, bus.SubjectReconcileRequest, wrapperspb.String("now")); err != nil {
		t.Fatalf("cli requests a reconcile: %v", err)
	}
	if _, err := connectDenied(t, env.server, "cli").Publish(ctx, op1, wrapperspb.String("forged")); err == nil {
		t.Fatal("the cli dispatched an operation")
	}
}

// No user of a deployment, admin included, holds the JetStream API, the key-value buckets or the object
// stores wholesale, and only the watcher may write the committed trees.
func TestNoUserHoldsJetStreamKeyValueOrObjectsWholesale(t *testing.T) {
	users, err := bus.ServiceUsers(bus.ExampleDeploy().Topology)
	if err != nil {
		t.Fatal(err)
	}
	wholesale := []string{">", "$JS.>", "$JS.API.>", "$KV.>", "$O.>", "$JS.API.STREAM.>", "$JS.API.CONSUMER.>"}
	for _, u := range users {
		for _, s := range append(slices.Clone(u.Permissions.Publish), u.Permissions.Subscribe...) {
			if slices.Contains(wholesale, s) {
				t.Errorf("user %s holds %s", u.Name, s)
			}
			if strings.HasPrefix(s, "$O."+bus.ObjectTrees+".") && u.Name != "watcher" {
				t.Errorf("user %s may write the committed trees (%s)", u.Name, s)
			}
		}
	}
	names := map[string]bool{}
	for _, u := range users {
		names[u.Name] = true
	}
	for _, want := range []string{"admin", "cli", "operator"} {
		if !names[want] {
			t.Errorf("the deployment has no %s user", want)
		}
	}
}

// The cli user reads, previews and asks; it cannot apply a work tree, overwrite a committed tree, write
// ownership records or the planners' control state, publish on the work queue, read it through a consumer
// of its own, or manage JetStream. The operator may apply on its own subject only; the admin user manages
// streams and nothing else.
func TestCLICannotApplyNorWriteWhatTheServicesTrust(t *testing.T) {
	users := deployUsers(t)
	env := startEnv(t, bus.ServerConfig{Users: users}, bus.ProvisionConfig{})
	ctx := testContext(t)
	admin := env.bus
	tree := "sha256-" + strings.Repeat("ab", 32)
	if _, err := connectAs(t, env.server, "watcher").PutObjectIfAbsent(ctx, bus.ObjectTrees, tree, wrapperspb.String("committed")); err != nil {
		t.Fatalf("watcher stores a tree: %v", err)
	}

	cli := connectAs(t, env.server, "cli")
	if _, err := cli.PutObjectIfAbsent(ctx, bus.ObjectPreviews, "sha256-"+strings.Repeat("cd", 32), wrapperspb.String("preview")); err != nil {
		t.Fatalf("cli creates a preview: %v", err)
	}
	var read wrapperspb.StringValue
	if err := cli.GetObject(ctx, bus.ObjectTrees, tree, &read); err != nil {
		t.Fatalf("cli reads a committed tree: %v", err)
	}
	if _, err := cli.Publish(ctx, bus.SubjectReconcileRequest, wrapperspb.String("now")); err != nil {
		t.Fatalf("cli requests a reconcile: %v", err)
	}

	denied := connectDenied(t, env.server, "cli")
	short := func() context.Context {
		c, cancel := context.WithTimeout(ctx, 2*time.Second)
		t.Cleanup(cancel)
		return c
	}
	if obs, err := denied.JetStream().ObjectStore(short(), bus.ObjectTrees); err == nil {
		if _, err := obs.PutBytes(short(), tree, []byte("forged")); err == nil {
			t.Error("cli overwrote a committed tree")
		}
	}
	if err := admin.GetObject(ctx, bus.ObjectTrees, tree, &read); err != nil || read.GetValue() != "committed" {
		t.Errorf("committed tree after the cli's attempt: %q, %v", read.GetValue(), err)
	}
	if _, err := denied.PutBytes(ctx, bus.BucketOwned, "lab.101", []byte("forged")); err == nil {
		t.Error("cli wrote an ownership record")
	}
	if _, err := denied.PutBytes(ctx, bus.BucketClusters, "lab", []byte("forged")); err == nil {
		t.Error("cli wrote the planners' control state")
	}
	op1, _ := bus.OpSubject("lab", "pve1")
	if _, err := denied.Publish(ctx, op1, wrapperspb.String("forged op")); err == nil {
		t.Error("cli published on the work queue")
	}
	if err := denied.EnsureConsumer(ctx, bus.ConsumerConfig{Stream: bus.StreamOps, Durable: "cli_ops", Filter: op1}); err == nil {
		t.Error("cli created a consumer on the work queue")
	}
	if err := denied.ReadStream(ctx, bus.StreamOps, bus.FilterOps, 0, func(*bus.Message) error { return nil }); err == nil {
		t.Error("cli read the work queue")
	}
	for _, user := range []string{"cli", "operator"} {
		subject, _ := bus.WorktreeApplySubject(user)
		if _, err := denied.Publish(ctx, subject, wrapperspb.String("apply")); err == nil {
			t.Errorf("cli published a work-tree apply on %s", subject)
		}
	}
	if err := denied.JetStream().DeleteStream(short(), bus.StreamRepo); err == nil {
		t.Error("cli deleted a stream")
	}
	if _, err := denied.Provision(ctx, bus.ProvisionConfig{Replicas: 1, LeaseTTL: time.Minute}); err == nil {
		t.Error("cli provisioned")
	}

	own, _ := bus.WorktreeApplySubject("operator")
	if _, err := connectAs(t, env.server, "operator").Publish(ctx, own, wrapperspb.String("apply")); err != nil {
		t.Fatalf("operator publishes a work-tree apply on its own subject: %v", err)
	}
	other, _ := bus.WorktreeApplySubject("operator-bob")
	if _, err := connectDenied(t, env.server, "operator").Publish(ctx, other, wrapperspb.String("apply")); err == nil {
		t.Error("operator published a work-tree apply on another user's subject")
	}

	adminDenied := connectDenied(t, env.server, "admin")
	if _, err := adminDenied.PutBytes(ctx, bus.BucketOwned, "lab.101", []byte("forged")); err == nil {
		t.Error("admin wrote an ownership record")
	}
	if _, err := adminDenied.Publish(ctx, bus.SubjectReconcileRequest, wrapperspb.String("now")); err == nil {
		t.Error("admin published a reconcile request")
	}
	if err := adminDenied.GetObject(ctx, bus.ObjectTrees, tree, &read); err == nil {
		t.Error("admin read a tree")
	}
}
