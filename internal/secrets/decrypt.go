package secrets

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/getsops/sops/v3"
	"github.com/getsops/sops/v3/aes"
	sopsage "github.com/getsops/sops/v3/age"
	"github.com/getsops/sops/v3/keyservice"
	"github.com/getsops/sops/v3/logging"
	"github.com/sirupsen/logrus"
)

// quietSOPS silences sops' own loggers once: they write text to stderr outside the caller's slog handler, and
// everything they would say is reported by this package's errors.
var quietSOPS sync.Once

// Decrypt decrypts a cluster's secrets file into a Store. file names the file in messages (say, its path in
// the repository); data is its content, read by the caller from a git tree or from disk. The file is always
// read as YAML, whatever its name. Age identities come from keys (nil: none); files encrypted to other SOPS
// key backends (PGP, cloud KMS, Vault) are decrypted by sops' own key service with that backend's usual
// configuration.
//
// The steps are those of sops' decrypt package (load, recover the data key, decrypt the tree, verify the MAC),
// driven through sops' public tree and key-service API so the age identities can be injected: the decrypt
// package only reads them from the process environment, which a library serving several clusters must not
// change. The YAML is read into sops' tree by loadEncryptedTree (yamltree.go), which builds the tree sops' YAML
// store builds without linking that store's dependencies. Every failure is an *Error of one Class, never
// sops' own text.
//
// Decrypt does not cache; a Decryptor does.
func Decrypt(ctx context.Context, file string, data []byte, keys KeySource) (*Store, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	quietSOPS.Do(func() { logging.SetLevel(logrus.PanicLevel) })

	enc, shapeErr := parseDocument(file, data, false)
	if enc == nil {
		return nil, shapeErr
	}
	if !enc.hasSOPS {
		return nil, &Error{Class: ClassNotEncrypted, File: file, Message: "the file has no sops metadata: it is " +
			"not encrypted; encrypt it with sops (see docs/secrets.md) and never commit the plaintext"}
	}
	if shapeErr != nil {
		return nil, shapeErr
	}
	if err := checkEncrypted(file, enc); err != nil {
		return nil, err
	}

	tree, err := loadEncryptedTree(data)
	if err != nil {
		return nil, &Error{Class: ClassMalformed, File: file, Message: "the sops metadata block cannot be read; " +
			"re-encrypt the file with sops"}
	}
	recipients, backends := keyInventory(tree.Metadata)

	svc := &keyService{}
	if slices.Contains(backends, sopsage.KeyTypeIdentifier) && keys != nil {
		ids, err := keys.AgeKeys()
		if err != nil {
			return nil, withFile(err, file)
		}
		svc.ageKeys = ids
	}
	dataKey, err := tree.Metadata.GetDataKeyWithKeyServices(
		[]keyservice.KeyServiceClient{keyservice.NewCustomLocalClient(svc)}, nil)
	if err != nil {
		return nil, &Error{Class: ClassNoKey, File: file, Message: svc.noKeyMessage(recipients, backends)}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}

	cipher := aes.NewCipher()
	mac, err := tree.Decrypt(dataKey, cipher)
	if err != nil {
		return nil, &Error{Class: ClassTampered, File: file, Message: "a value does not authenticate: the file " +
			"was changed after it was encrypted; restore it from git history or re-encrypt it with sops"}
	}
	stored, err := cipher.Decrypt(tree.Metadata.MessageAuthenticationCode, dataKey,
		tree.Metadata.LastModified.Format(time.RFC3339))
	if err != nil || stored != mac {
		return nil, &Error{Class: ClassTampered, File: file, Message: "MAC mismatch: entries were added, removed " +
			"or changed after the file was encrypted; restore it from git history or re-encrypt it with sops"}
	}

	plain, err := plainYAML(tree.Branches)
	if err != nil {
		return nil, &Error{Class: ClassMalformed, File: file, Message: "the decrypted document cannot be rendered"}
	}
	dec, err := parseDocument(file, plain, true)
	clear(plain)
	if err != nil {
		return nil, positionsFrom(err, enc)
	}
	return newStore(file, data, recipients, enc, dec)
}

// checkEncrypted refuses entries that sops left in clear in the committed file (an unencrypted_suffix or an
// encrypted_regex that does not cover them): a credential stored that way is already public.
func checkEncrypted(file string, enc *document) error {
	var errs []error
	for _, path := range slices.Sorted(maps.Keys(enc.entries)) {
		l := enc.entries[path]
		if l.value != "" && !strings.HasPrefix(l.value, encPrefix) {
			errs = append(errs, &Error{Class: ClassNotEncrypted, File: file, Line: l.line, Column: l.column, Entry: path,
				Message: "stored in clear in the committed file (sops left it unencrypted: check the file's " +
					"unencrypted_suffix, encrypted_regex or encrypted_suffix); re-encrypt it and rotate the credential"})
		}
	}
	return errors.Join(errs...)
}

// positionsFrom moves the positions of shape errors found in the decrypted document to the committed file's.
func positionsFrom(err error, enc *document) error {
	fix := func(e error) error {
		var se *Error
		if !errors.As(e, &se) {
			return e
		}
		c := *se
		c.Line, c.Column = 0, 0
		if l, ok := enc.entries[c.Entry]; ok {
			c.Line, c.Column = l.line, l.column
		}
		return &c
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		parts := j.Unwrap()
		out := make([]error, len(parts))
		for i, p := range parts {
			out[i] = fix(p)
		}
		return errors.Join(out...)
	}
	return fix(err)
}

// withFile sets File on the *Error values of err that have none.
func withFile(err error, file string) error {
	set := func(e error) error {
		// One level of the tree only: withFile rebuilds the joined list it walks, and an *Error wrapped in
		// another error keeps its wrapper untouched.
		if se, ok := e.(*Error); ok && se.File == "" { //nolint:errorlint // deliberate single-level rewrite
			c := *se
			c.File = file
			return &c
		}
		return e
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		parts := j.Unwrap()
		out := make([]error, len(parts))
		for i, p := range parts {
			out[i] = set(p)
		}
		return errors.Join(out...)
	}
	return set(err)
}

// keyInventory lists the file's age recipients (public keys) and the key backends it is encrypted to.
func keyInventory(m sops.Metadata) (recipients, backends []string) {
	for _, group := range m.KeyGroups {
		for _, k := range group {
			backends = append(backends, k.TypeToIdentifier())
			if ak, ok := k.(*sopsage.MasterKey); ok {
				recipients = append(recipients, ak.Recipient)
			}
		}
	}
	slices.Sort(recipients)
	slices.Sort(backends)
	return slices.Compact(recipients), slices.Compact(backends)
}

// keyService answers sops' requests for the data key: age keys with the injected identities, any other
// backend through sops' own key service. Its errors are never shown: a failure is explained by
// noKeyMessage.
type keyService struct {
	ageKeys *AgeKeys
}

var _ keyservice.KeyServiceServer = (*keyService)(nil)

func (s *keyService) Decrypt(ctx context.Context, req *keyservice.DecryptRequest) (*keyservice.DecryptResponse, error) {
	if ak := req.GetKey().GetAgeKey(); ak != nil {
		if s.ageKeys.Len() == 0 {
			return nil, errors.New("no age identity")
		}
		mk := sopsage.MasterKey{Recipient: ak.GetRecipient(), EncryptedKey: string(req.GetCiphertext())}
		sopsage.ParsedIdentities(s.ageKeys.ids).ApplyToMasterKey(&mk)
		plain, err := mk.Decrypt()
		if err != nil {
			return nil, errors.New("no matching age identity")
		}
		return &keyservice.DecryptResponse{Plaintext: plain}, nil
	}
	return keyservice.Server{}.Decrypt(ctx, req)
}

func (s *keyService) Encrypt(context.Context, *keyservice.EncryptRequest) (*keyservice.EncryptResponse, error) {
	return nil, errors.New("encryption is not offered")
}

// noKeyMessage explains why no data key could be recovered.
func (s *keyService) noKeyMessage(recipients, backends []string) string {
	var b strings.Builder
	switch {
	case len(recipients) > 0 && s.ageKeys.Len() == 0:
		fmt.Fprintf(&b, "no age identity is available to decrypt it (set %s to the key file, or %s); "+
			"the file is encrypted to %s", EnvAgeKeyFile, EnvAgeKey, strings.Join(recipients, ", "))
	case len(recipients) > 0:
		fmt.Fprintf(&b, "no available age identity (%s) matches the file's recipients %s; add the matching "+
			"private key to the key file", s.ageKeys, strings.Join(recipients, ", "))
	default:
		b.WriteString("no key can decrypt the file's data key")
	}
	var other []string
	for _, be := range backends {
		if be != sopsage.KeyTypeIdentifier {
			other = append(other, be)
		}
	}
	if len(other) > 0 {
		fmt.Fprintf(&b, "; the %s key(s) it is also encrypted to could not be used", strings.Join(other, ", "))
	}
	return b.String()
}

// contentDigest is the digest of an encrypted file's bytes, the cache key and the Store's identity.
func contentDigest(data []byte) string {
	sum := sha256.Sum256(data)
	return "sha256:" + hex.EncodeToString(sum[:])
}
