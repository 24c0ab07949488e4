package executor

import (
	"context"

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
