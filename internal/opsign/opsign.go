// Package opsign signs the operations a planner dispatches and verifies them where they run. Keys are
// ed25519 in the NATS nkeys format: a planner holds a seed (SU…, as `nk -gen user` writes it), executors
// hold the public keys (U…) of the planners they trust, several at once while a key is rotated.
//
// What is signed is the operation's canonical bytes (internal/wire: deterministic protobuf with the
// signature fields cleared), so the run id, the plan id, the node and every value an executor would write
// are covered; changing any of them breaks the signature.
package opsign

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/nats-io/nkeys"
)

// KeyFile is the name of the planner's seed in a data directory (proxops up, diff, apply).
const KeyFile = "planner.nk"

// Signer signs operations with a planner's private key.
type Signer struct {
	// priv is the private key the seed stands for, derived once: nkeys derives it again from the seed on
	// every signature, which cost as much as the signature itself. ed25519 signatures are deterministic,
	// so the bytes are the same either way.
	priv   ed25519.PrivateKey
	public string
}

// NewSigner reads a seed: a bare nkey seed, or a NATS credentials file that holds one.
func NewSigner(seed []byte) (*Signer, error) {
	kp, err := nkeys.ParseDecoratedNKey(seed)
	if err != nil {
		return nil, fmt.Errorf("signing key: %w", err)
	}
	pub, err := kp.PublicKey()
	if err != nil {
		return nil, fmt.Errorf("signing key: %w", err)
	}
	encoded, err := kp.Seed()
	if err != nil {
		return nil, fmt.Errorf("signing key: %w", err)
	}
	_, raw, err := nkeys.DecodeSeed(encoded)
	if err != nil {
		return nil, fmt.Errorf("signing key: %w", err)
	}
	if len(raw) != ed25519.SeedSize {
		return nil, fmt.Errorf("signing key: seed of %d bytes, want %d", len(raw), ed25519.SeedSize)
	}
	return &Signer{priv: ed25519.NewKeyFromSeed(raw), public: pub}, nil
}

// LoadSigner reads the seed file at path.
func LoadSigner(path string) (*Signer, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("signing key: %w", err)
	}
	s, err := NewSigner(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

// EnsureSigner loads the key pair of a data directory (dir/KeyFile), generating it on first use with mode
// 0600 (and the directory with mode 0700 if it does not exist yet).
func EnsureSigner(dir string) (*Signer, error) {
	path := filepath.Join(dir, KeyFile)
	if _, err := os.Stat(path); err == nil {
		return LoadSigner(path)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("signing key: %w", err)
	}
	seed, err := GenerateSeed()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("write signing key: %w", err)
	}
	if err := writeNew(path, append(seed, '\n')); errors.Is(err, fs.ErrExist) {
		// Another process generated it first.
		return LoadSigner(path)
	} else if err != nil {
		return nil, fmt.Errorf("write signing key: %w", err)
	}
	return LoadSigner(path)
}

// GenerateSeed makes a new key pair and returns its seed (what `nk -gen user` prints).
func GenerateSeed() ([]byte, error) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		return nil, fmt.Errorf("generate signing key: %w", err)
	}
	seed, err := kp.Seed()
	if err != nil {
		return nil, fmt.Errorf("generate signing key: %w", err)
	}
	return seed, nil
}

// writeNew writes a new file with mode 0600 and syncs it; an existing file is an error.
func writeNew(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		_ = f.Close()
		_ = os.Remove(path)
		return err
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		_ = os.Remove(path)
		return err
	}
	return f.Close()
}

// PublicKey is the key executors trust (U…).
func (s *Signer) PublicKey() string { return s.public }

// Sign signs payload; it is a wire.SignFunc.
func (s *Signer) Sign(payload []byte) (signer string, signature []byte, err error) {
	return s.public, ed25519.Sign(s.priv, payload), nil
}

// The reasons a Verifier refuses an operation.
var (
	ErrUnsigned     = errors.New("operation is not signed")
	ErrUnknownKey   = errors.New("operation is signed by a key this executor does not trust")
	ErrBadSignature = errors.New("operation's signature does not match its content")
)

// Reason is a short label for a refusal (metrics, dead-letter header): unsigned, unknown_key,
// bad_signature, or invalid for anything else.
func Reason(err error) string {
	switch {
	case errors.Is(err, ErrUnsigned):
		return "unsigned"
	case errors.Is(err, ErrUnknownKey):
		return "unknown_key"
	case errors.Is(err, ErrBadSignature):
		return "bad_signature"
	}
	return "invalid"
}

// Verifier checks signatures against the planner keys an executor trusts.
type Verifier struct {
	keys map[string]nkeys.KeyPair
}

// NewVerifier builds a verifier from public nkeys; each must be a valid public key.
func NewVerifier(public []string) (*Verifier, error) {
	v := &Verifier{keys: map[string]nkeys.KeyPair{}}
	var errs []error
	for _, k := range public {
		k = strings.TrimSpace(k)
		kp, err := nkeys.FromPublicKey(k)
		if err != nil {
			errs = append(errs, fmt.Errorf("trusted planner key %q: %w", k, err))
			continue
		}
		v.keys[k] = kp
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return v, nil
}

// Keys returns the trusted public keys, sorted.
func (v *Verifier) Keys() []string {
	out := make([]string, 0, len(v.keys))
	for k := range v.keys {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// Verify checks that signature is signer's signature of payload and that signer is trusted.
func (v *Verifier) Verify(signer string, signature, payload []byte) error {
	if signer == "" && len(signature) == 0 {
		return ErrUnsigned
	}
	kp, ok := v.keys[signer]
	if !ok {
		return fmt.Errorf("%w (%s)", ErrUnknownKey, short(signer))
	}
	if len(signature) == 0 || kp.Verify(payload, signature) != nil {
		return fmt.Errorf("%w (signer %s)", ErrBadSignature, short(signer))
	}
	return nil
}

// short is a printable prefix of a key named in an error (it may be anything a sender chose).
func short(k string) string {
	if k == "" {
		return "no signer named"
	}
	const n = 12
	out := []rune{}
	for _, r := range k {
		if len(out) == n {
			return string(out) + "…"
		}
		if r < 0x20 || r > 0x7e {
			r = '?'
		}
		out = append(out, r)
	}
	return string(out)
}

// SplitKeys splits a list of public keys given in one string (an environment variable): separated by
// commas or white space.
func SplitKeys(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' || r == '\n' })
}
