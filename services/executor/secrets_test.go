package executor_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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

// demoFiles reads the demo secrets file, its rotated version and the key both are encrypted to.
func demoFiles(t *testing.T) (current, rotated []byte, keys *secrets.AgeKeys) {
	t.Helper()
	demo := filepath.Join("..", "..", "internal", "secrets", "testdata", "demo")
	read := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join(demo, name))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	keys, err := secrets.ParseAgeKeys("demo.agekey", read("demo.agekey"))
	if err != nil {
		t.Fatal(err)
	}
	return read("secrets.sops.yaml"), read("rotated.sops.yaml"), keys
}

// digestOf is the version of a secrets file as the planner names it.
func digestOf(t *testing.T, keys *secrets.AgeKeys, data []byte) string {
	t.Helper()
	store, err := secrets.NewDecryptor(keys).Decrypt(testContext(t), "secrets.sops.yaml", data)
	if err != nil {
		t.Fatal(err)
	}
	return store.Digest()
}

// writeFile replaces a file's content at once (a rename), as a deployment tool does.
func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	tmp := path + ".new"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// A standalone executor reads its secrets file again when the file changes: a token rotated in the file
// (and on PVE) is used by the next operation, without a restart. An operation planned with another
// version of the file than the executor holds is refused, with an error saying the file is out of date,
// and nothing is written to PVE.
func TestSecretsFileIsReadAgainWhenItChangesAndAnOtherVersionIsRefused(t *testing.T) {
	current, rotated, keys := demoFiles(t)
	oldDigest, newDigest := digestOf(t, keys, current), digestOf(t, keys, rotated)
	path := filepath.Join(t.TempDir(), "secrets.sops.yaml")
	writeFile(t, path, current)
	source := &executor.SecretsFile{Path: path, Decryptor: secrets.NewDecryptor(keys),
		Credentials: func(store *secrets.Store) (executor.Credentials, error) {
			auth, err := secrets.ResolvePVECredentials(secrets.PVECredentialInput{Cluster: cluster, Auth: secrets.AuthToken, Store: store,
				Refs: secrets.PVESecretRefs{User: "proxops-user", TokenID: "proxops-token-id", Token: "proxops-token"}})
			if err != nil {
				return executor.Credentials{}, err
			}
			id, secret, _ := auth.APIToken()
			return executor.Credentials{TokenID: id.Reveal(), TokenSecret: secret.Reveal()}, nil
		}}
	tokenOf := func() (string, string) {
		c, err := source.Current(testContext(t))
		if err != nil {
			t.Fatal(err)
		}
		return c.TokenID, c.TokenSecret
	}
	spec := pvesim.DefaultSpec()
	spec.Guests = []pvesim.GuestSpec{{VMID: 100, Type: "qemu", Node: "pve1", Config: seedVM}}
	e := newEnv(t, spec)
	id, secret := tokenOf()
	e.sim.SetToken(id, secret)
	cfg := e.config()
	cfg.PVE.TokenID, cfg.PVE.TokenSecret = "", ""
	cfg.Credentials = source
	e.start(cfg)
	sshkeys := []plan.KV{{Key: "sshkeys", SecretRefs: []string{"cloud-init.ssh-keys.main"}}}
	e.mustSucceed(e.dispatch(plan.Operation{Node: "pve1", VMID: 100, GuestType: inventory.QEMU, Action: plan.ActionConfigure,
		Values: sshkeys, SecretsDigest: oldDigest}))

	// Rotation: the file and PVE get the new token; the executor keeps running.
	writeFile(t, path, rotated)
	_, newSecret := tokenOf()
	if newSecret == secret {
		t.Fatal("the rotated file holds the old token")
	}
	e.sim.SetToken(id, newSecret)
	e.sim.ResetLog()
	e.mustSucceed(e.dispatch(plan.Operation{Node: "pve1", VMID: 100, GuestType: inventory.QEMU, Action: plan.ActionConfigure,
		Values: append(sshkeys, plan.KV{Key: "description", Value: "rotated"}), SecretsDigest: newDigest}))
	if conf, _ := e.sim.Config(100); conf["description"] != "rotated" {
		t.Fatalf("description %q after the operation with the rotated token", conf["description"])
	}
	for _, r := range e.sim.Requests() {
		if r.Status == 401 {
			t.Errorf("%s %s refused: the old token was used", r.Method, r.Path)
		}
	}

	// A plan made with the old file: refused before anything reaches PVE.
	e.sim.ResetLog()
	stale := e.dispatch(plan.Operation{Node: "pve1", VMID: 100, GuestType: inventory.QEMU, Action: plan.ActionConfigure,
		Values: append(sshkeys, plan.KV{Key: "description", Value: "stale"}), SecretsDigest: oldDigest})
	r := e.final(stale, 30*time.Second)
	if r.Status != plan.StatusFailed || r.ErrorClass != plan.ErrorTerminal || !strings.Contains(r.Message, "secrets file is out of date") ||
		!strings.Contains(r.Message, oldDigest) || !strings.Contains(r.Message, newDigest) {
		t.Fatalf("stale operation: %s (%s): %s", r.Status, r.ErrorClass, r.Message)
	}
	if n := e.sim.Count("POST", "/nodes/{node}/qemu/{vmid}/config"); n != 0 {
		t.Errorf("%d config writes for a refused operation", n)
	}
	// Operations without secret references do not depend on the file's version.
	e.mustSucceed(e.dispatch(plan.Operation{Node: "pve1", VMID: 100, GuestType: inventory.QEMU, Action: plan.ActionConfigure,
		Values: kvs("description", "no secrets")}))
}
