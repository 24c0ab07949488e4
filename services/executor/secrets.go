package executor

import (
	"context"
	"fmt"
	"os"

	"github.com/proxops/proxops/internal/plan"
	"github.com/proxops/proxops/internal/pve"
	"github.com/proxops/proxops/internal/secrets"
)

// storeResolver resolves operations' secret references from a decrypted SOPS store.
type storeResolver struct{ store *secrets.Store }

// StoreSecrets makes a decrypted secrets store the executor's resolver of secret references
// (cloud-init.ssh-keys.<name>, cloud-init.passwords.<name>).
func StoreSecrets(store *secrets.Store) pve.SecretResolver { return storeResolver{store: store} }

// Resolve implements pve.SecretResolver; its errors name the reference, never a value.
func (r storeResolver) Resolve(_ context.Context, ref string) (string, error) {
	v, err := r.store.Resolve(ref, "")
	if err != nil {
		return "", err
	}
	return v.Reveal(), nil
}

// secretsVersion names the version of the secrets file it resolves from (the file and its digest).
func (r storeResolver) secretsVersion() (file, digest string) {
	return r.store.File(), r.store.Digest()
}

// versioned is a secret resolver that knows which version of the secrets file it resolves from.
type versioned interface {
	secretsVersion() (file, digest string)
}

// secretsMismatch refuses an operation whose secret references the planner resolved against another
// version of the secrets file than the one this executor holds: the executor would write other keys than
// the ones the plan compared. Operations without references, from a planner that names no version, or
// with a resolver that knows no version pass.
func secretsMismatch(op plan.Operation, r pve.SecretResolver) error {
	if op.SecretsDigest == "" {
		return nil
	}
	v, ok := r.(versioned)
	if !ok {
		return nil
	}
	file, digest := v.secretsVersion()
	if digest == op.SecretsDigest {
		return nil
	}
	return fmt.Errorf("secrets file is out of date: the plan was made with the secrets file at %s, but this "+
		"executor's %s is at %s; give the executor the same file as the repository, then apply again",
		op.SecretsDigest, file, digest)
}

// SecretsFile is the credential source of an executor whose credentials and cloud-init secrets come from
// a SOPS file on its own disk. The file is read on every observe and operation and decrypted again only
// when its content changed (by content digest), so a rotated file is used without a restart.
type SecretsFile struct {
	// Path is the SOPS file.
	Path string
	// Decryptor decrypts it and keeps the result by content digest.
	Decryptor *secrets.Decryptor
	// Credentials builds the PVE credentials from a decrypted version of the file (its entries, with the
	// environment and flags as the precedence rules say). Its Secrets field is set by Current.
	Credentials func(*secrets.Store) (Credentials, error)
}

// Current implements CredentialSource. Its errors name the file and entries, never a value.
func (f *SecretsFile) Current(ctx context.Context) (Credentials, error) {
	data, err := os.ReadFile(f.Path)
	if err != nil {
		return Credentials{}, fmt.Errorf("secrets file: %w", err)
	}
	store, err := f.Decryptor.Decrypt(ctx, f.Path, data)
	if err != nil {
		return Credentials{}, err
	}
	creds, err := f.Credentials(store)
	if err != nil {
		return Credentials{}, err
	}
	creds.Secrets = StoreSecrets(store)
	return creds, nil
}
