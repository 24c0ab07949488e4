package bus_test

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/proxops/proxops/internal/bus"
)

// contractStreams names every stream behind the contract's streams, buckets and object stores, sorted.
func contractStreams(cfg bus.ProvisionConfig) []string {
	var names []string
	for _, s := range bus.StreamConfigs(cfg) {
		names = append(names, s.Name)
	}
	for _, k := range bus.KeyValueConfigs(cfg) {
		names = append(names, "KV_"+k.Bucket)
	}
	for _, o := range bus.ObjectStoreConfigs(cfg) {
		names = append(names, "OBJ_"+o.Bucket)
	}
	slices.Sort(names)
	return names
}

// streamStorage maps every stream on the server to its storage type.
func streamStorage(t *testing.T, b *bus.Bus) map[string]jetstream.StorageType {
	t.Helper()
	ctx := testContext(t)
	out := map[string]jetstream.StorageType{}
	lister := b.JetStream().ListStreams(ctx)
	for info := range lister.Info() {
		out[info.Config.Name] = info.Config.Storage
	}
	if err := lister.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestProvisionInMemoryKeepsEveryResourceInMemory(t *testing.T) {
	t.Parallel()
	mem := bus.ProvisionConfig{Memory: true}
	env := startEnv(t, bus.ServerConfig{}, mem)
	storage := streamStorage(t, env.bus)
	var names []string
	for name, st := range storage {
		names = append(names, name)
		if st != jetstream.MemoryStorage {
			t.Errorf("%s: storage %s, want memory", name, st)
		}
	}
	slices.Sort(names)
	if diff := cmp.Diff(contractStreams(mem), names); diff != "" {
		t.Errorf("streams on the server (-contract +server):\n%s", diff)
	}
	// The buckets and object stores report their storage through their own status too.
	ctx := testContext(t)
	js := env.bus.JetStream()
	for _, k := range bus.KeyValueConfigs(mem) {
		kv, err := js.KeyValue(ctx, k.Bucket)
		if err != nil {
			t.Fatalf("bucket %s: %v", k.Bucket, err)
		}
		st, err := kv.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		kst, ok := st.(*jetstream.KeyValueBucketStatus)
		if !ok {
			t.Fatalf("bucket %s: status of type %T", k.Bucket, st)
		}
		if got := kst.StreamInfo().Config.Storage; got != jetstream.MemoryStorage {
			t.Errorf("bucket %s: storage %s, want memory", k.Bucket, got)
		}
	}
	for _, o := range bus.ObjectStoreConfigs(mem) {
		obs, err := js.ObjectStore(ctx, o.Bucket)
		if err != nil {
			t.Fatalf("object store %s: %v", o.Bucket, err)
		}
		st, err := obs.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.Storage() != jetstream.MemoryStorage {
			t.Errorf("object store %s: storage %s, want memory", o.Bucket, st.Storage())
		}
	}
}

func TestProvisionInMemoryTwiceChangesNothing(t *testing.T) {
	t.Parallel()
	mem := bus.ProvisionConfig{Memory: true}
	env := startEnv(t, bus.ServerConfig{}, mem)
	ctx := testContext(t)
	before := streamCreated(t, env.bus)
	res, err := env.bus.Provision(ctx, mem)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 9+7+3 {
		t.Fatalf("provisioned %d resources, want 19: %v", len(res), res)
	}
	for _, r := range res {
		if r.Action != bus.Unchanged {
			t.Errorf("%s %s: %s on the second run, want unchanged", r.Kind, r.Name, r.Action)
		}
	}
	if diff := cmp.Diff(before, streamCreated(t, env.bus)); diff != "" {
		t.Errorf("streams changed (-before +after):\n%s", diff)
	}
}

// TestProvisionInMemoryKeepsNothingAcrossARestart restarts the server on the same data directory: a
// file-backed deployment keeps its messages (TestRestartWithSameDataDirectoryKeepsMessages), an in-memory
// one starts empty and provisions everything anew.
func TestProvisionInMemoryKeepsNothingAcrossARestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ctx := testContext(t)
	mem := bus.ProvisionConfig{Memory: true}
	srv, err := bus.StartServer(ctx, bus.ServerConfig{Dir: dir, SyncAlways: true})
	if err != nil {
		t.Fatal(err)
	}
	b, err := srv.Connect(bus.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Provision(ctx, mem); err != nil {
		t.Fatal(err)
	}
	subject, _ := bus.StatusSubject("lab")
	if _, err := b.Publish(ctx, subject, wrapperspb.String("gone after a restart")); err != nil {
		t.Fatal(err)
	}
	key, _ := bus.OwnedKey("lab", 100)
	if _, err := b.PutProto(ctx, bus.BucketOwned, key, wrapperspb.String("uuid=x")); err != nil {
		t.Fatal(err)
	}
	if _, err := b.LastMessage(ctx, bus.StreamStatus, subject); err != nil {
		t.Fatalf("message before the restart: %v", err)
	}
	_ = b.Close()
	srv.Shutdown()

	srv2, err := bus.StartServer(ctx, bus.ServerConfig{Dir: dir, SyncAlways: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv2.Shutdown)
	b2, err := srv2.Connect(bus.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b2.Close() })
	if left := streamStorage(t, b2); len(left) != 0 {
		t.Fatalf("streams after the restart: %v, want none", left)
	}
	res, err := b2.Provision(ctx, mem)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if r.Action != bus.Created {
			t.Errorf("%s %s: %s after the restart, want created", r.Kind, r.Name, r.Action)
		}
	}
	if _, err := b2.LastMessage(ctx, bus.StreamStatus, subject); err == nil {
		t.Error("the status message survived the restart")
	}
}
