package secrets_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/proxops/proxops/internal/diag"
	"github.com/proxops/proxops/internal/inventory"
	"github.com/proxops/proxops/internal/secrets"
)

const labFile = "clusters/lab/secrets.sops.yaml"

func decryptFixture(t testing.TB, name string) *secrets.Store {
	t.Helper()
	s, err := secrets.Decrypt(context.Background(), labFile, fixture(t, name), keysFrom(t, "both"))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestLookupsFailClosedNamingFileEntryAndField(t *testing.T) {
	store := decryptFixture(t, "missing-entry.sops.yaml")
	idLine := lineOf(t, "missing-entry.sops.yaml", "proxops-token-id:")
	tests := []struct {
		name  string
		get   func() (secrets.Value, error)
		class secrets.Class
		want  string
	}{
		{"absent secret", func() (secrets.Value, error) { return store.Secret("proxops-token") },
			secrets.ClassMissingEntry, labFile + ": secrets.proxops-token: no such entry in the secrets file; proxops fails closed"},
		{"empty secret", func() (secrets.Value, error) { return store.Secret("proxops-token-id") },
			secrets.ClassMissingEntry, fmt.Sprintf("%s:%d:5: secrets.proxops-token-id: the entry is empty; proxops fails closed", labFile, idLine)},
		{"absent password block", func() (secrets.Value, error) { return store.Password("default") },
			secrets.ClassMissingEntry, labFile + ": cloud-init.passwords.default: no such entry in the secrets file; proxops fails closed"},
		{"reference to an absent password", func() (secrets.Value, error) {
			return store.Resolve("cloud-init.passwords.default", "vm/lab/web.yaml: VM/web: spec.cloud-init-data.ci-password-ref")
		}, secrets.ClassMissingEntry, labFile + ": vm/lab/web.yaml: VM/web: spec.cloud-init-data.ci-password-ref: " +
			"cloud-init.passwords.default: no such entry in the secrets file; proxops fails closed"},
		{"password reference naming an SSH key", func() (secrets.Value, error) {
			return store.ResolvePassword("cloud-init.ssh-keys.main", "spec.cloud-init-data.ci-password-ref")
		}, secrets.ClassBadReference, `spec.cloud-init-data.ci-password-ref: reference "cloud-init.ssh-keys.main" ` +
			"names an SSH key where a cloud-init.passwords.<name> reference is expected"},
		{"reference of the wrong form", func() (secrets.Value, error) {
			return store.Resolve("cloud-init.ssh-key.main", "spec.cloud-init-data.ssh-key-refs[0]")
		}, secrets.ClassBadReference, `spec.cloud-init-data.ssh-key-refs[0]: reference "cloud-init.ssh-key.main" ` +
			"is not of the form cloud-init.ssh-keys.<name> or cloud-init.passwords.<name>"},
		{"cluster without a secrets file", func() (secrets.Value, error) {
			return (*secrets.Store)(nil).Resolve("cloud-init.ssh-keys.main", "spec.cloud-init-data.ssh-key-refs[0]")
		}, secrets.ClassMissingEntry, "spec.cloud-init-data.ssh-key-refs[0]: cloud-init.ssh-keys.main: the cluster has no " +
			"secrets-file to resolve it from; proxops fails closed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, err := tt.get()
			if err == nil {
				t.Fatal("no error")
			}
			if !v.IsEmpty() {
				t.Error("a value came back with the error")
			}
			if secrets.ClassOf(err) != tt.class {
				t.Errorf("class %v, want %v", secrets.ClassOf(err), tt.class)
			}
			if err.Error() != tt.want {
				t.Errorf("message\n got %s\nwant %s", err, tt.want)
			}
			assertNoPlaintext(t, "the error", err.Error())
		})
	}
	if v, err := store.SSHKey("main"); err != nil || !strings.HasPrefix(v.Reveal(), "ssh-ed25519 ") {
		t.Errorf("present key: %v", err)
	}
}

func TestWithFieldNamesTheReferencingField(t *testing.T) {
	store := decryptFixture(t, "missing-entry.sops.yaml")
	_, err := store.Secret("proxops-token")
	err = secrets.WithField(err, "pve.clusters.lab.secrets.pve.token")
	want := labFile + ": pve.clusters.lab.secrets.pve.token: secrets.proxops-token: no such entry in the secrets file; proxops fails closed"
	if err.Error() != want {
		t.Errorf("got  %s\nwant %s", err, want)
	}
	if again := secrets.WithField(err, "other"); again.Error() != want {
		t.Errorf("a second field replaced the first: %s", again)
	}
	plain := errors.New("plain")
	// Identity, not errors.Is: the very same value must come back, not a wrapper around it.
	if secrets.WithField(plain, "f") != plain || secrets.WithField(nil, "f") != nil { //nolint:errorlint // see above
		t.Error("WithField changed an error that is not an *Error")
	}
	var se *secrets.Error
	if !errors.As(err, &se) {
		t.Fatal("not an *Error")
	}
	d := se.Diagnostic()
	wantDiag := diag.Diagnostic{Severity: diag.Error, File: labFile, Field: "pve.clusters.lab.secrets.pve.token",
		Message: "secrets.proxops-token: no such entry in the secrets file; proxops fails closed"}
	if diff := cmp.Diff(wantDiag, d); diff != "" {
		t.Errorf("diagnostic (-want +got):\n%s", diff)
	}
}

func TestResolveSSHKeysKeepsManifestOrderAndDropsDuplicates(t *testing.T) {
	store := decryptFixture(t, "valid.sops.yaml")
	main, _ := store.SSHKey("main")
	deploy, _ := store.SSHKey("deploy")
	set, err := store.ResolveSSHKeys([]string{
		"cloud-init.ssh-keys.deploy", "cloud-init.ssh-keys.main", "cloud-init.ssh-keys.main-again", "cloud-init.ssh-keys.deploy",
	}, "spec.cloud-init-data.ssh-key-refs")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, k := range set.Keys {
		got = append(got, k.Reveal())
	}
	if d := cmp.Diff([]string{deploy.Reveal(), main.Reveal()}, got); d != "" {
		t.Errorf("keys (-want +got):\n%s", d)
	}
	if set.Joined().Reveal() != deploy.Reveal()+"\n"+main.Reveal() {
		t.Errorf("joined value is not the lines in order")
	}
	if want := inventory.SSHKeysDigest([]string{main.Reveal(), deploy.Reveal()}); set.Digest != want {
		t.Errorf("digest %s, want the inventory digest %s", set.Digest, want)
	}
	// The digest is what a live guest's sshkeys digest is compared with: independent of order.
	other, err := store.ResolveSSHKeys([]string{"cloud-init.ssh-keys.main", "cloud-init.ssh-keys.deploy"}, "f")
	if err != nil || other.Digest != set.Digest {
		t.Errorf("order changed the digest: %v", err)
	}
	assertNoPlaintext(t, "a printed key set", fmt.Sprintf("%v %+v %#v", set, set, set))
}

func TestResolveSSHKeysReportsEveryBadReference(t *testing.T) {
	store := decryptFixture(t, "valid.sops.yaml")
	set, err := store.ResolveSSHKeys([]string{
		"cloud-init.ssh-keys.main", "cloud-init.ssh-keys.absent", "cloud-init.passwords.default", "ssh-ed25519 AAAA pasted",
	}, "spec.cloud-init-data.ssh-key-refs")
	if err == nil {
		t.Fatal("no error")
	}
	if len(set.Keys) != 0 || set.Digest != "" {
		t.Error("keys came back with the error")
	}
	for _, want := range []string{
		"spec.cloud-init-data.ssh-key-refs[1]: cloud-init.ssh-keys.absent: no such entry",
		`spec.cloud-init-data.ssh-key-refs[2]: reference "cloud-init.passwords.default" names a password`,
		`spec.cloud-init-data.ssh-key-refs[3]: reference "ssh-ed25519 AAAA pasted" is not of the form`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	if !errors.Is(err, secrets.ErrMissingEntry) || !errors.Is(err, secrets.ErrBadReference) {
		t.Errorf("joined error does not carry both classes: %v", err)
	}
}

func TestParseRef(t *testing.T) {
	tests := []struct {
		ref  string
		want secrets.Ref
		ok   bool
	}{
		{"cloud-init.ssh-keys.main", secrets.Ref{Section: secrets.SSHKeys, Name: "main"}, true},
		{"cloud-init.passwords.default-2", secrets.Ref{Section: secrets.Passwords, Name: "default-2"}, true},
		{"cloud-init.ssh-keys.0ps", secrets.Ref{Section: secrets.SSHKeys, Name: "0ps"}, true},
		{"cloud-init.ssh-keys." + strings.Repeat("a", 64), secrets.Ref{Section: secrets.SSHKeys, Name: strings.Repeat("a", 64)}, true},
		{"cloud-init.ssh-keys." + strings.Repeat("a", 65), secrets.Ref{}, false},
		{"cloud-init.ssh-keys.", secrets.Ref{}, false},
		{"cloud-init.ssh-keys.Main", secrets.Ref{}, false},
		{"cloud-init.ssh-keys.-main", secrets.Ref{}, false},
		{"cloud-init.ssh-keys.a.b", secrets.Ref{}, false},
		{"cloud-init.ssh-keys.a b", secrets.Ref{}, false},
		{"cloud-init.passwords", secrets.Ref{}, false},
		{"secrets.proxops-token", secrets.Ref{}, false},
		{"", secrets.Ref{}, false},
	}
	for _, tt := range tests {
		got, err := secrets.ParseRef(tt.ref)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("ParseRef(%q) = %v, %v", tt.ref, got, err)
		}
		if err != nil && !errors.Is(err, secrets.ErrBadReference) {
			t.Errorf("ParseRef(%q): class %v", tt.ref, secrets.ClassOf(err))
		}
		if tt.ok && got.String() != tt.ref {
			t.Errorf("String() = %q", got.String())
		}
	}
	if long := strings.Repeat("x", 500); strings.Contains(fmt.Sprint(secrets.ParseRef(long)), long) {
		t.Error("a long reference is repeated whole")
	}
}
