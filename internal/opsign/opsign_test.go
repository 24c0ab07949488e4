package opsign_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/proxops/proxops/internal/opsign"
)

// A data directory's key pair is generated once, readable by its owner only, and the same key is loaded
// every time after.
func TestDataDirectoryKeyIsGeneratedOnceWithMode0600(t *testing.T) {
	dir := t.TempDir()
	first, err := opsign.EnsureSigner(dir)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(filepath.Join(dir, opsign.KeyFile))
	if err != nil {
		t.Fatal(err)
	}
	if mode := st.Mode().Perm(); mode != 0o600 {
		t.Errorf("key file mode %o, want 600", mode)
	}
	again, err := opsign.EnsureSigner(dir)
	if err != nil || again.PublicKey() != first.PublicKey() {
		t.Fatalf("second load: %v (%v), want the same key %s", again, err, first.PublicKey())
	}
	if k := first.PublicKey(); len(k) != 56 || k[0] != 'U' {
		t.Errorf("public key %q is not a user nkey", k)
	}
}

// Verify accepts exactly a trusted key's signature over the same bytes.
func TestVerifierAcceptsOnlyTrustedSignaturesOverTheSameBytes(t *testing.T) {
	newSigner := func() *opsign.Signer {
		seed, err := opsign.GenerateSeed()
		if err != nil {
			t.Fatal(err)
		}
		s, err := opsign.NewSigner(seed)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	trusted, other := newSigner(), newSigner()
	v, err := opsign.NewVerifier([]string{trusted.PublicKey()})
	if err != nil {
		t.Fatal(err)
	}
	payload := []byte("operation bytes")
	signer, sig, err := trusted.Sign(payload)
	if err != nil {
		t.Fatal(err)
	}
	if err := v.Verify(signer, sig, payload); err != nil {
		t.Errorf("a trusted signature: %v", err)
	}
	otherSigner, otherSig, _ := other.Sign(payload)
	for name, c := range map[string]struct {
		signer  string
		sig     []byte
		payload []byte
		want    error
		reason  string
	}{
		"unsigned":         {"", nil, payload, opsign.ErrUnsigned, "unsigned"},
		"untrusted key":    {otherSigner, otherSig, payload, opsign.ErrUnknownKey, "unknown_key"},
		"changed content":  {signer, sig, []byte("operation bytes!"), opsign.ErrBadSignature, "bad_signature"},
		"no signature":     {signer, nil, payload, opsign.ErrBadSignature, "bad_signature"},
		"signature reused": {signer, otherSig, payload, opsign.ErrBadSignature, "bad_signature"},
	} {
		err := v.Verify(c.signer, c.sig, c.payload)
		if !errors.Is(err, c.want) || opsign.Reason(err) != c.reason {
			t.Errorf("%s: %v (%s), want %v (%s)", name, err, opsign.Reason(err), c.want, c.reason)
		}
	}
	if _, err := opsign.NewVerifier([]string{"UNOTAKEY"}); err == nil {
		t.Error("a malformed public key is accepted")
	}
}
