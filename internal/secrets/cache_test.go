package secrets_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/proxops/proxops/internal/secrets"
)

// countingKeys counts how often decryption asks for identities: once per real decryption of an age file.
type countingKeys struct {
	calls atomic.Int64
	mu    sync.Mutex
	keys  secrets.KeySource
}

func (c *countingKeys) AgeKeys() (*secrets.AgeKeys, error) {
	c.calls.Add(1)
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.keys.AgeKeys()
}

func (c *countingKeys) set(k secrets.KeySource) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.keys = k
}

func TestDecryptorCachesByContent(t *testing.T) {
	ctx := context.Background()
	keys := &countingKeys{keys: keysFrom(t, "lab")}
	d := secrets.NewDecryptor(keys)
	valid := fixture(t, "valid.sops.yaml")

	first, err := d.Decrypt(ctx, labFile, valid)
	if err != nil {
		t.Fatal(err)
	}
	again, err := d.Decrypt(ctx, labFile, bytes.Clone(valid))
	if err != nil {
		t.Fatal(err)
	}
	if again != first || keys.calls.Load() != 1 {
		t.Errorf("same bytes: same store %v, decryptions %d; want the cached store and 1 decryption", again == first, keys.calls.Load())
	}

	// A new commit of the file with a rotated token.
	rotated, err := d.Decrypt(ctx, labFile, fixture(t, "rotated.sops.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if rotated == first || rotated.Digest() == first.Digest() {
		t.Fatal("rotated content returned the old store")
	}
	oldTok, _ := first.Secret("proxops-token")
	newTok, _ := rotated.Secret("proxops-token")
	if oldTok.Equal(newTok) || newTok.Reveal() != "c4cc7ed2-c70c-4017-9fae-f63c54bb15e6" {
		t.Error("the rotated store does not hold the new token")
	}

	// Going back to the old commit needs no decryption; neither does the same bytes under another file name
	// reuse a store that names the wrong file.
	if back, _ := d.Decrypt(ctx, labFile, valid); back != first {
		t.Error("the old content was decrypted again")
	}
	other, err := d.Decrypt(ctx, "clusters/other/secrets.sops.yaml", valid)
	if err != nil || other == first || other.File() != "clusters/other/secrets.sops.yaml" {
		t.Errorf("another file with the same bytes: %v, file %q", err, other.File())
	}
	if n := keys.calls.Load(); n != 3 || d.Len() != 3 {
		t.Errorf("decryptions %d, cached %d; want 3 and 3", n, d.Len())
	}
}

func TestDecryptorDoesNotCacheFailures(t *testing.T) {
	ctx := context.Background()
	keys := &countingKeys{keys: noKeys}
	d := secrets.NewDecryptor(keys)
	valid := fixture(t, "valid.sops.yaml")
	if _, err := d.Decrypt(ctx, labFile, valid); !errors.Is(err, secrets.ErrNoKey) {
		t.Fatalf("without keys: %v", err)
	}
	keys.set(keysFrom(t, "lab")) // the operator fixed SOPS_AGE_KEY_FILE
	if _, err := d.Decrypt(ctx, labFile, valid); err != nil {
		t.Fatalf("after the key appeared: %v", err)
	}
}

func TestDecryptorEvictsTheLeastRecentlyUsed(t *testing.T) {
	ctx := context.Background()
	keys := &countingKeys{keys: keysFrom(t, "lab")}
	d := secrets.NewDecryptor(keys)
	valid := fixture(t, "valid.sops.yaml")
	name := func(i int) string { return fmt.Sprintf("clusters/c%02d/secrets.sops.yaml", i) }
	for i := range secrets.DefaultCacheSize {
		if _, err := d.Decrypt(ctx, name(i), valid); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := d.Decrypt(ctx, name(0), valid); err != nil { // c00 is now the most recent
		t.Fatal(err)
	}
	if _, err := d.Decrypt(ctx, name(secrets.DefaultCacheSize), valid); err != nil { // evicts c01
		t.Fatal(err)
	}
	if d.Len() != secrets.DefaultCacheSize {
		t.Errorf("cached %d, want %d", d.Len(), secrets.DefaultCacheSize)
	}
	before := keys.calls.Load()
	_, _ = d.Decrypt(ctx, name(0), valid)
	if keys.calls.Load() != before {
		t.Error("the recently used entry was evicted")
	}
	_, _ = d.Decrypt(ctx, name(1), valid)
	if keys.calls.Load() != before+1 {
		t.Error("the least recently used entry was kept")
	}
}

func TestDecryptorIsSafeForConcurrentUse(t *testing.T) {
	ctx := context.Background()
	keys := &countingKeys{keys: keysFrom(t, "both")}
	d := secrets.NewDecryptor(keys)
	files := map[string][]byte{
		"clusters/lab/secrets.sops.yaml":  fixture(t, "valid.sops.yaml"),
		"clusters/edge/secrets.sops.yaml": fixture(t, "edge.sops.yaml"),
		"clusters/next/secrets.sops.yaml": fixture(t, "rotated.sops.yaml"),
	}
	wantToken := map[string]string{
		"clusters/lab/secrets.sops.yaml":  "bdada1ed-2934-4ec1-8628-42f4fdc982d3",
		"clusters/edge/secrets.sops.yaml": "9c3a6cdf-86a5-43b0-ab15-8978ed89207d",
		"clusters/next/secrets.sops.yaml": "c4cc7ed2-c70c-4017-9fae-f63c54bb15e6",
	}
	stores := sync.Map{}
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := range 12 {
		wg.Go(func() {
			for i := range 20 {
				for file, data := range files {
					s, err := d.Decrypt(ctx, file, data)
					if err != nil {
						errs <- err
						return
					}
					tok, err := s.Secret("proxops-token")
					if err != nil {
						errs <- fmt.Errorf("goroutine %d round %d: %s: %w", g, i, file, err)
						return
					}
					if tok.Reveal() != wantToken[file] {
						errs <- fmt.Errorf("goroutine %d round %d: %s has the wrong token", g, i, file)
						return
					}
					if prev, loaded := stores.LoadOrStore(file, s); loaded && prev != s {
						errs <- fmt.Errorf("%s decrypted to two different stores", file)
						return
					}
					if _, err := s.ResolveSSHKeys([]string{"cloud-init.ssh-keys.main"}, "f"); err != nil {
						errs <- err
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := keys.calls.Load(); n != int64(len(files)) {
		t.Errorf("%d decryptions for %d distinct files; concurrent callers must share one", n, len(files))
	}
}
