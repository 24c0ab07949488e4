package opsign_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/nats-io/nkeys"

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

// A signature is the one the seed's nkey makes over the same bytes: the key derived once at load signs
// exactly as the seed does, so executors trusting the public key accept it.
func TestSignerSignsExactlyAsItsNKeySeed(t *testing.T) {
	seed, err := opsign.GenerateSeed()
	if err != nil {
		t.Fatal(err)
	}
	s, err := opsign.NewSigner(seed)
	if err != nil {
		t.Fatal(err)
	}
	kp, err := nkeys.FromSeed(seed)
	if err != nil {
		t.Fatal(err)
	}
	payload := []byte("create qemu 100 on pve1")
	signer, sig, err := s.Sign(payload)
	if err != nil {
		t.Fatal(err)
	}
	want, err := kp.Sign(payload)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(sig, want) {
		t.Fatalf("signature %x, the nkey signs %x", sig, want)
	}
	if pub, _ := kp.PublicKey(); signer != pub {
		t.Fatalf("signer %s, the seed's public key is %s", signer, pub)
	}
	if err := kp.Verify(payload, sig); err != nil {
		t.Fatalf("the nkey does not verify the signature: %v", err)
	}
}

// A public key is no signing key: it is refused when loaded, not at the first signature.
func TestSignerRefusesAPublicKey(t *testing.T) {
	seed, err := opsign.GenerateSeed()
	if err != nil {
		t.Fatal(err)
	}
	kp, err := nkeys.FromSeed(seed)
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	if _, err := opsign.NewSigner([]byte(pub)); err == nil {
		t.Fatal("a public key was accepted as a signing key")
	}
}
