package pipeline_test

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/proxops/proxops/internal/pvesim"
	"github.com/proxops/proxops/internal/secrets"
)

// An operation that carries secret references names the version of the secrets file the planner resolved
// them against (the digest of the encrypted file's bytes); operations without references name none.
func TestOperationsWithSecretReferencesNameTheSecretsFileVersion(t *testing.T) {
	demo := filepath.Join("..", "..", "internal", "secrets", "testdata", "demo")
	sops, err := os.ReadFile(filepath.Join(demo, "secrets.sops.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	keyText, err := os.ReadFile(filepath.Join(demo, "demo.agekey"))
	if err != nil {
		t.Fatal(err)
	}
	keys, err := secrets.ParseAgeKeys("demo.agekey", keyText)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(sops)
	want := "sha256:" + hex.EncodeToString(sum[:])

	e := newEnv(t, pvesim.DefaultSpec())
	e.startExecutors("pve1", "pve2", "pve3")
	cfg := e.plannerConfig("a")
	cfg.Keys = keys
	e.startPlanner(cfg)
	files := e.vms(map[string]int{"plain": 101, "web": 102})
	files["clusters/lab/config.yaml"] = e.lab("      secrets-file: secrets.sops.yaml\n")
	files["clusters/lab/secrets.sops.yaml"] = string(sops)
	files["vm/lab/web.yaml"] += `  hardware:
    cloud-init: {enabled: true, storage: local-lvm}
  cloud-init-data:
    ssh-key-refs: [cloud-init.ssh-keys.main]
`
	o := e.wait(e.announce(files, true), time.Minute)
	if len(o.rejected) > 0 {
		t.Fatalf("plan rejected: %s", o.rejected[0].Rejection.Diagnostics)
	}
	if len(o.planned) == 0 {
		t.Fatal("no plan")
	}
	withRefs := 0
	for _, op := range o.planned[0].Plan.Operations {
		refs := false
		for _, kv := range op.Values {
			refs = refs || len(kv.SecretRefs) > 0
		}
		switch {
		case refs && op.SecretsDigest != want:
			t.Errorf("%s %s carries secret references with secrets digest %q, want %q", op.Ref, op.Action, op.SecretsDigest, want)
		case !refs && op.SecretsDigest != "":
			t.Errorf("%s %s has no secret reference but names secrets digest %q", op.Ref, op.Action, op.SecretsDigest)
		}
		if refs {
			withRefs++
		}
	}
	if withRefs == 0 {
		t.Fatalf("no operation carries a secret reference: %+v", o.planned[0].Plan.Operations)
	}
}
