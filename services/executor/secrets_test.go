package executor_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/proxops/proxops/internal/inventory"
	"github.com/proxops/proxops/internal/plan"
	"github.com/proxops/proxops/internal/pvesim"
	"github.com/proxops/proxops/internal/secrets"
	"github.com/proxops/proxops/services/executor"
)

// An operation's secret references are resolved from the SOPS store right before the write; the key
// reaches PVE, and no result carries it.
func TestSecretReferencesAreResolvedFromTheStore(t *testing.T) {
	demo := filepath.Join("..", "..", "internal", "secrets", "testdata", "demo")
	data, err := os.ReadFile(filepath.Join(demo, "secrets.sops.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	keyFile, err := os.ReadFile(filepath.Join(demo, "demo.agekey"))
	if err != nil {
		t.Fatal(err)
	}
	keys, err := secrets.ParseAgeKeys("demo.agekey", keyFile)
	if err != nil {
		t.Fatal(err)
	}
	store, err := secrets.NewDecryptor(keys).Decrypt(testContext(t), "secrets.sops.yaml", data)
	if err != nil {
		t.Fatal(err)
	}
	want, err := store.SSHKey("main")
	if err != nil {
		t.Fatal(err)
	}
	spec := pvesim.DefaultSpec()
	spec.Guests = []pvesim.GuestSpec{{VMID: 100, Type: "qemu", Node: "pve1", Config: seedVM}}
	e := newEnv(t, spec)
	cfg := e.config()
	cfg.Secrets = executor.StoreSecrets(store)
	e.start(cfg)
	e.mustSucceed(e.dispatch(plan.Operation{Node: "pve1", VMID: 100, GuestType: inventory.QEMU, Action: plan.ActionConfigure,
		Values: []plan.KV{{Key: "sshkeys", SecretRefs: []string{"cloud-init.ssh-keys.main"}}}}))
	conf, _ := e.sim.Config(100)
	got, err := inventory.DecodeSSHKeys(conf["sshkeys"])
	if err != nil || len(got) != 1 || got[0] != strings.TrimSpace(want.Reveal()) {
		t.Fatalf("sshkeys on PVE: %q (%v)", conf["sshkeys"], err)
	}
	blob := strings.Fields(want.Reveal())[1]
	for _, r := range e.results() {
		if strings.Contains(r.Message, blob) || strings.Contains(strings.Join(r.TaskLog, "\n"), blob) {
			t.Fatalf("a result carries the key: %+v", r)
		}
	}
}
