package secrets_test

import (
	"context"
	"testing"

	"github.com/proxops/proxops/internal/secrets"
)

// BenchmarkDecrypt measures one full decryption of a cluster's secrets file (age unwrap, AES-GCM, MAC, shape).
func BenchmarkDecrypt(b *testing.B) {
	data, keys := fixture(b, "valid.sops.yaml"), keysFrom(b, "lab")
	for b.Loop() {
		if _, err := secrets.Decrypt(context.Background(), labFile, data, keys); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecryptorCached measures what every plan pays for an unchanged file: hashing it for the cache.
func BenchmarkDecryptorCached(b *testing.B) {
	data := fixture(b, "valid.sops.yaml")
	d := secrets.NewDecryptor(keysFrom(b, "lab"))
	for b.Loop() {
		if _, err := d.Decrypt(context.Background(), labFile, data); err != nil {
			b.Fatal(err)
		}
	}
}
