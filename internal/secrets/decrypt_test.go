package secrets_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/getsops/sops/v3/decrypt"
	"github.com/google/go-cmp/cmp"
	"go.yaml.in/yaml/v3"

	"github.com/proxops/proxops/internal/secrets"
)

func TestDecryptReadsEveryBlock(t *testing.T) {
	store, err := secrets.Decrypt(context.Background(), "clusters/lab/secrets.sops.yaml", fixture(t, "valid.sops.yaml"), keysFrom(t, "lab"))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, name := range store.Names(secrets.Secrets) {
		v, err := store.Secret(name)
		if err == nil {
			got["secrets."+name] = v.Reveal()
		}
	}
	for _, name := range store.Names(secrets.SSHKeys) {
		v, err := store.SSHKey(name)
		if err != nil {
			t.Fatal(err)
		}
		got["ssh-keys."+name] = v.Reveal()
	}
	for _, name := range store.Names(secrets.Passwords) {
		if v, err := store.Password(name); err == nil {
			got["passwords."+name] = v.Reveal()
		}
	}
	want := map[string]string{
		"secrets.proxops-user":      "proxops@pve",
		"secrets.proxops-token-id":  "proxops",
		"secrets.proxops-token":     "bdada1ed-2934-4ec1-8628-42f4fdc982d3",
		"secrets.proxops-git-token": "glpat-lab-Hq83tK2mWx9vPz",
		"secrets.proxops-port":      "8006",
		"ssh-keys.main":             "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIDu/gSfsxbwpnF8W9dzIMZ7s8ogvP7m6XNSqlKCqjugh lab-main@proxops.invalid",
		"ssh-keys.main-again":       "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIDu/gSfsxbwpnF8W9dzIMZ7s8ogvP7m6XNSqlKCqjugh lab-main@proxops.invalid",
		"ssh-keys.deploy":           "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIM+CnbzVHIYA0j9xiZSgcMsuBiQgZzbCVv565twdTI65 lab-deploy@proxops.invalid",
		"passwords.default":         "lab-cipassword-Zq7wR4nB",
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("decrypted entries (-want +got):\n%s", d)
	}
	if names := store.Names(secrets.Passwords); !slices.Equal(names, []string{"default", "empty"}) {
		t.Errorf("password names = %v", names)
	}
	if store.File() != "clusters/lab/secrets.sops.yaml" || !strings.HasPrefix(store.Digest(), "sha256:") {
		t.Errorf("file %q digest %q", store.File(), store.Digest())
	}
	lab := strings.TrimSpace(string(fixture(t, "age/lab.agekey")))
	if r := store.Recipients(); len(r) != 1 || !strings.Contains(lab, "public key: "+r[0]) {
		t.Errorf("recipients %v do not match the lab key", r)
	}
	assertNoPlaintext(t, "a printed store", fmt.Sprintf("%v %+v %#v", store, store, *store))
}

func TestDecryptMatchesTheSOPSDecryptPackage(t *testing.T) {
	// sops' own decrypt package reads its identity from the environment; give it the test key only.
	t.Setenv("SOPS_AGE_KEY_FILE", filepath.Join("testdata", "age", "lab.agekey"))
	t.Setenv("SOPS_AGE_KEY", "")
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	data := fixture(t, "valid.sops.yaml")
	clear, err := decrypt.Data(data, "yaml")
	if err != nil {
		t.Fatalf("sops decrypt: %v", err)
	}
	var want struct {
		Secrets   map[string]string `yaml:"secrets"`
		CloudInit struct {
			SSHKeys   map[string]string `yaml:"ssh-keys"`
			Passwords map[string]string `yaml:"passwords"`
		} `yaml:"cloud-init"`
	}
	if err := yaml.Unmarshal(clear, &want); err != nil {
		t.Fatal(err)
	}
	store, err := secrets.Decrypt(context.Background(), "valid.sops.yaml", data, keysFrom(t, "lab"))
	if err != nil {
		t.Fatal(err)
	}
	check := func(section secrets.Section, m map[string]string, get func(string) (secrets.Value, error)) {
		if names := store.Names(section); !slices.Equal(names, slices.Sorted(mapKeys(m))) {
			t.Errorf("%s names = %v, sops has %v", section, names, slices.Sorted(mapKeys(m)))
		}
		for name, w := range m {
			v, err := get(name)
			if w == "" {
				if !errors.Is(err, secrets.ErrMissingEntry) {
					t.Errorf("%s.%s: empty in sops, got err %v", section, name, err)
				}
				continue
			}
			if err != nil || v.Reveal() != w {
				t.Errorf("%s.%s differs from sops' plaintext (err %v)", section, name, err)
			}
		}
	}
	check(secrets.Secrets, want.Secrets, store.Secret)
	check(secrets.SSHKeys, want.CloudInit.SSHKeys, store.SSHKey)
	check(secrets.Passwords, want.CloudInit.Passwords, store.Password)
}

func mapKeys(m map[string]string) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

func TestDecryptFailuresAreClassifiedAndNameTheFile(t *testing.T) {
	const file = "clusters/lab/secrets.sops.yaml"
	lab := keysFrom(t, "lab")
	tests := []struct {
		name    string
		data    []byte
		keys    secrets.KeySource
		class   secrets.Class
		is      error
		contain []string
	}{
		{name: "encrypted to another key", data: fixture(t, "wrong-key.sops.yaml"), keys: lab,
			class: secrets.ClassNoKey, is: secrets.ErrNoKey,
			contain: []string{"no available age identity (1 age identity from testdata/age/lab.agekey) matches the file's recipients age1"}},
		{name: "no identity at all", data: fixture(t, "valid.sops.yaml"), keys: noKeys,
			class: secrets.ClassNoKey, is: secrets.ErrNoKey,
			contain: []string{"no age identity is available", "SOPS_AGE_KEY_FILE", "encrypted to age1"}},
		{name: "tampered value", data: fixture(t, "tampered-value.sops.yaml"), keys: lab,
			class: secrets.ClassTampered, is: secrets.ErrTampered,
			contain: []string{"a value does not authenticate", "changed after it was encrypted"}},
		{name: "tampered MAC", data: fixture(t, "tampered-mac.sops.yaml"), keys: lab,
			class: secrets.ClassTampered, is: secrets.ErrTampered, contain: []string{"MAC mismatch"}},
		{name: "entry removed after encryption", data: fixture(t, "entry-removed.sops.yaml"), keys: lab,
			class: secrets.ClassTampered, is: secrets.ErrTampered, contain: []string{"MAC mismatch"}},
		{name: "unencrypted", data: fixture(t, "unencrypted.yaml"), keys: lab,
			class: secrets.ClassNotEncrypted, is: secrets.ErrNotEncrypted,
			contain: []string{"no sops metadata", "not encrypted"}},
		{name: "entry left in clear", data: fixture(t, "clear-value.sops.yaml"), keys: lab,
			class: secrets.ClassNotEncrypted, is: secrets.ErrNotEncrypted,
			contain: []string{fmt.Sprintf("%s:%d:5: secrets.proxops-token_unencrypted: stored in clear", file,
				lineOf(t, "clear-value.sops.yaml", "proxops-token_unencrypted:"))}},
		{name: "non-scalar leaves and a bad name", data: fixture(t, "malformed-shape.sops.yaml"), keys: lab,
			class: secrets.ClassMalformed, is: secrets.ErrMalformed,
			contain: []string{
				fmt.Sprintf("%s:%d:5: secrets.nested: must be a single value (a string or a number), found a mapping", file,
					lineOf(t, "malformed-shape.sops.yaml", "nested:")),
				fmt.Sprintf("%s:%d:5: secrets.list: must be a single value (a string or a number), found a list", file,
					lineOf(t, "malformed-shape.sops.yaml", "list:")),
				fmt.Sprintf(`%s:%d:9: cloud-init.ssh-keys: entry "Bad_Name": the name must match [a-z0-9][a-z0-9-]*`, file,
					lineOf(t, "malformed-shape.sops.yaml", "Bad_Name:")),
			}},
		{name: "SSH key that is not a key line", data: fixture(t, "malformed-sshkey.sops.yaml"), keys: lab,
			class: secrets.ClassMalformed, is: secrets.ErrMalformed,
			contain: []string{fmt.Sprintf("%s:%d:9: cloud-init.ssh-keys.broken: is not an OpenSSH public-key line", file,
				lineOf(t, "malformed-sshkey.sops.yaml", "broken:"))}},
		{name: "neither block", data: fixture(t, "neither.sops.yaml"), keys: lab,
			class: secrets.ClassMalformed, is: secrets.ErrMalformed,
			contain: []string{"neither a secrets: nor a cloud-init: block"}},
		{name: "not YAML", data: []byte("secrets: [unclosed\n  token: x\n"), keys: lab,
			class: secrets.ClassMalformed, is: secrets.ErrMalformed, contain: []string{file + ":", "not valid YAML"}},
		{name: "empty file", data: nil, keys: lab,
			class: secrets.ClassMalformed, is: secrets.ErrMalformed, contain: []string{"the file is empty"}},
		{name: "a list, not a mapping", data: []byte("- secrets\n"), keys: lab,
			class: secrets.ClassMalformed, is: secrets.ErrMalformed, contain: []string{file + ":1:1: the document is a list"}},
		{name: "two documents", data: append(fixture(t, "valid.sops.yaml"), []byte("---\nsecrets: {}\n")...), keys: lab,
			class: secrets.ClassMalformed, is: secrets.ErrMalformed, contain: []string{"more than one YAML document"}},
		{name: "unreadable sops metadata", data: []byte("secrets:\n  a: ENC[AES256_GCM,data:x]\nsops: 3\n"), keys: lab,
			class: secrets.ClassMalformed, is: secrets.ErrMalformed, contain: []string{"sops metadata block cannot be read"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store, err := secrets.Decrypt(context.Background(), file, tt.data, tt.keys)
			if err == nil {
				t.Fatalf("decrypted to %v, want an error", store)
			}
			if store != nil {
				t.Error("a store came back with the error")
			}
			if got := secrets.ClassOf(err); got != tt.class {
				t.Errorf("class %v, want %v (%v)", got, tt.class, err)
			}
			if !errors.Is(err, tt.is) {
				t.Errorf("errors.Is(err, %v) is false: %v", tt.is, err)
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, file+":") {
				t.Errorf("message does not start with the file: %s", msg)
			}
			for _, c := range tt.contain {
				if !strings.Contains(msg, c) {
					t.Errorf("message lacks %q:\n%s", c, msg)
				}
			}
			assertNoPlaintext(t, "the error", fmt.Sprintf("%v | %+v | %#v", err, err, err))
		})
	}
}

func TestDecryptHonoursCancellation(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := secrets.Decrypt(ctx, "f", fixture(t, "valid.sops.yaml"), keysFrom(t, "lab")); !errors.Is(err, context.Canceled) {
		t.Errorf("err = %v, want context.Canceled", err)
	}
}

func TestOneKeyFileServesSeveralClusters(t *testing.T) {
	both := keysFrom(t, "both")
	if both.Len() != 2 {
		t.Fatalf("both.agekey holds %d identities", both.Len())
	}
	for _, f := range []string{"valid.sops.yaml", "edge.sops.yaml"} {
		if _, err := secrets.Decrypt(context.Background(), f, fixture(t, f), both); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
	if _, err := secrets.Decrypt(context.Background(), "edge", fixture(t, "edge.sops.yaml"), keysFrom(t, "lab")); !errors.Is(err, secrets.ErrNoKey) {
		t.Errorf("the lab key alone decrypted the edge file: %v", err)
	}
}

func TestEnvironmentKeySource(t *testing.T) {
	labFile, _ := filepath.Abs("testdata/age/lab.agekey")
	bothText := string(fixture(t, "age/both.agekey"))
	cfg := t.TempDir()
	if err := os.MkdirAll(filepath.Join(cfg, "sops", "age"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cfg, "sops", "age", "keys.txt"), fixture(t, "age/edge.agekey"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		env       map[string]string
		decrypts  []string // fixtures the source can decrypt
		wantErr   string
		wantCount int
	}{
		{name: "key file", env: map[string]string{"SOPS_AGE_KEY_FILE": labFile},
			decrypts: []string{"valid.sops.yaml"}, wantCount: 1},
		{name: "key text with two identities", env: map[string]string{"SOPS_AGE_KEY": bothText},
			decrypts: []string{"valid.sops.yaml", "edge.sops.yaml"}, wantCount: 2},
		{name: "both variables add up", env: map[string]string{"SOPS_AGE_KEY_FILE": labFile, "SOPS_AGE_KEY": bothText},
			decrypts: []string{"valid.sops.yaml", "edge.sops.yaml"}, wantCount: 3},
		{name: "sops default key file when nothing is set", env: map[string]string{"XDG_CONFIG_HOME": cfg},
			decrypts: []string{"edge.sops.yaml"}, wantCount: 1},
		{name: "default key file under HOME", env: map[string]string{"HOME": filepath.Join(t.TempDir(), "nobody")},
			wantCount: 0},
		{name: "variables win over the default file", env: map[string]string{"XDG_CONFIG_HOME": cfg, "SOPS_AGE_KEY_FILE": labFile},
			decrypts: []string{"valid.sops.yaml"}, wantCount: 1},
		{name: "missing key file", env: map[string]string{"SOPS_AGE_KEY_FILE": "/nonexistent/proxops.agekey"},
			wantErr: "age key file SOPS_AGE_KEY_FILE=/nonexistent/proxops.agekey does not exist"},
		{name: "a line that is not a key", env: map[string]string{"SOPS_AGE_KEY": "# comment\nAGE-SECRET-KEY-1NOTAKEY\n"},
			wantErr: "SOPS_AGE_KEY: line 2 is not an age identity"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := secrets.FromEnvironment(func(k string) (string, bool) { v, ok := tt.env[k]; return v, ok })
			keys, err := src.AgeKeys()
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !errors.Is(err, secrets.ErrNoKey) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				if strings.Contains(err.Error(), "NOTAKEY") {
					t.Errorf("the error repeats the key line: %v", err)
				}
				// Decrypting with a broken source names the secrets file as well.
				_, err := secrets.Decrypt(context.Background(), "clusters/x/secrets.sops.yaml", fixture(t, "valid.sops.yaml"), src)
				if err == nil || !strings.HasPrefix(err.Error(), "clusters/x/secrets.sops.yaml: ") {
					t.Errorf("decrypt err = %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if keys.Len() != tt.wantCount {
				t.Errorf("%d identities, want %d (%v)", keys.Len(), tt.wantCount, keys)
			}
			assertNoPlaintext(t, "printed keys", fmt.Sprintf("%v %+v %#v %s", keys, keys, keys, *keys))
			for _, f := range tt.decrypts {
				if _, err := secrets.Decrypt(context.Background(), f, fixture(t, f), src); err != nil {
					t.Errorf("%s: %v", f, err)
				}
			}
		})
	}
}

func TestDemoSecretsGiveTheSimulatorToken(t *testing.T) {
	keys, err := secrets.ParseAgeKeys("demo.agekey", fixture(t, "demo/demo.agekey"))
	if err != nil {
		t.Fatal(err)
	}
	store, err := secrets.Decrypt(context.Background(), "clusters/demo/secrets.sops.yaml", fixture(t, "demo/secrets.sops.yaml"), keys)
	if err != nil {
		t.Fatal(err)
	}
	auth, err := secrets.ResolvePVECredentials(secrets.PVECredentialInput{Cluster: "demo", Store: store,
		Refs: secrets.PVESecretRefs{User: "proxops-user", TokenID: "proxops-token-id", Token: "proxops-token"}})
	if err != nil {
		t.Fatal(err)
	}
	id, secret, _ := auth.APIToken()
	if id.Reveal() != "proxops@pve!proxops" || secret.Reveal() != "0b6f2d4e-8a31-4c57-9e02-d1c3a5f7b9e4" {
		t.Errorf("demo token %s=%s", id.Reveal(), secret.Reveal())
	}
	keysSet, err := store.ResolveSSHKeys([]string{"cloud-init.ssh-keys.main", "cloud-init.ssh-keys.backup"}, "f")
	if err != nil || len(keysSet.Keys) != 2 {
		t.Errorf("demo ssh keys: %v", err)
	}
	if pw, err := store.ResolvePassword("cloud-init.passwords.default", "f"); err != nil || pw.Reveal() != "demo-cipassword-Kx4pT8vN" {
		t.Errorf("demo password: %v", err)
	}
}

// The recipients of a key set name what it decrypts with public keys only: one per identity, in order, and
// none of the key material.
func TestAgeKeysRecipientsArePublicKeysOnly(t *testing.T) {
	both := keysFrom(t, "both")
	rs := both.Recipients()
	if len(rs) != 2 || rs[0] == rs[1] {
		t.Fatalf("recipients of two identities: %v", rs)
	}
	for _, r := range rs {
		if !strings.HasPrefix(r, "age1") || strings.Contains(strings.ToUpper(r), "AGE-SECRET-KEY") {
			t.Fatalf("recipient %q is not a public key", r)
		}
	}
	lab := keysFrom(t, "lab").Recipients()
	if len(lab) != 1 || (lab[0] != rs[0] && lab[0] != rs[1]) {
		t.Fatalf("the lab key %v is not one of both's %v", lab, rs)
	}
	if (*secrets.AgeKeys)(nil).Recipients() != nil {
		t.Fatal("a nil set has recipients")
	}
}

// The key files of an environment are the ones its key source reads: SOPS_AGE_KEY_FILE, else the sops
// default file unless SOPS_AGE_KEY holds the keys.
func TestKeyFilesAreTheFilesTheEnvironmentSourceReads(t *testing.T) {
	for _, tt := range []struct {
		env  map[string]string
		want []string
	}{
		{map[string]string{"SOPS_AGE_KEY_FILE": "/etc/proxops/age.key", "XDG_CONFIG_HOME": "/cfg"}, []string{"/etc/proxops/age.key"}},
		{map[string]string{"XDG_CONFIG_HOME": "/cfg"}, []string{"/cfg/sops/age/keys.txt"}},
		{map[string]string{"HOME": "/home/ops"}, []string{"/home/ops/.config/sops/age/keys.txt"}},
		{map[string]string{"SOPS_AGE_KEY": "AGE-SECRET-KEY-1X", "HOME": "/home/ops"}, nil},
		{map[string]string{}, nil},
	} {
		got := secrets.KeyFiles(func(k string) (string, bool) { v, ok := tt.env[k]; return v, ok })
		if !slices.Equal(got, tt.want) {
			t.Errorf("key files of %v: %v, want %v", tt.env, got, tt.want)
		}
	}
}
