package secrets_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/proxops/proxops/internal/secrets"
)

func TestClusterFileIsReadFromTheRepositoryTree(t *testing.T) {
	fsys := fstest.MapFS{"clusters/lab/secrets.sops.yaml": {Data: fixture(t, "valid.sops.yaml")}}
	d := secrets.NewDecryptor(keysFrom(t, "lab"))
	store, err := d.ReadClusterFile(context.Background(), fsys, "clusters/lab/secrets.sops.yaml", secrets.RepositoryOnly)
	if err != nil || store == nil {
		t.Fatalf("read = %v, %v", store, err)
	}
	_, err = d.ReadClusterFile(context.Background(), fsys, "clusters/edge/secrets.sops.yaml", secrets.RepositoryOnly)
	if !errors.Is(err, secrets.ErrFileMissing) || secrets.ClassOf(err) != secrets.ClassFileMissing {
		t.Fatalf("missing file: err = %v", err)
	}
	if want := "clusters/edge/secrets.sops.yaml: secrets file does not exist"; !strings.HasPrefix(err.Error(), want) {
		t.Errorf("message %q, want it to start with %q", err, want)
	}
}

func TestClusterFileOutsideTheRepositoryIsReadFromTheHostOnlyWhenAllowed(t *testing.T) {
	file := filepath.Join(t.TempDir(), "lab.sops.yaml")
	if err := os.WriteFile(file, fixture(t, "valid.sops.yaml"), 0o600); err != nil {
		t.Fatal(err)
	}
	d := secrets.NewDecryptor(keysFrom(t, "lab"))
	// The tree holds nothing: a host path never falls back to it, nor the other way round.
	empty := fstest.MapFS{}
	if _, err := d.ReadClusterFile(context.Background(), empty, file, secrets.RepositoryOnly); !errors.Is(err, secrets.ErrOutsideRepository) {
		t.Fatalf("repository only: err = %v, want the outside-repository refusal", err)
	}
	if store, err := d.ReadClusterFile(context.Background(), empty, file, secrets.HostDisk); err != nil || store == nil {
		t.Fatalf("host disk: %v, %v", store, err)
	}
	home := t.TempDir()
	t.Setenv("HOME", home)
	if err := os.WriteFile(filepath.Join(home, "lab.sops.yaml"), fixture(t, "valid.sops.yaml"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := d.ReadClusterFile(context.Background(), empty, "~/lab.sops.yaml", secrets.HostDisk); err != nil {
		t.Fatalf("~ path: %v", err)
	}
	if _, err := d.ReadClusterFile(context.Background(), empty, "~/absent.sops.yaml", secrets.HostDisk); secrets.ClassOf(err) != secrets.ClassFileMissing {
		t.Fatalf("absent ~ path: err = %v", err)
	}
}
