package secrets

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/proxops/proxops/internal/inventory"
)

// Store is one decrypted secrets file: the flat secrets: block and the cloud-init ssh-keys: and passwords:
// blocks, each name mapped to a Value. A Store is immutable and safe for concurrent use. Every lookup that
// fails is an *Error (class ClassMissingEntry or ClassBadReference) naming the file, the entry and, where
// the caller says, the field that referenced it; it never falls back to anything else.
//
// The nil *Store stands for a cluster without a secrets file: every lookup on it fails closed.
type Store struct {
	file       string
	digest     string
	recipients []string
	entries    map[string]entry
}

type entry struct {
	section string
	name    string
	value   Value
	line    int
	column  int
}

// newStore builds a Store from the committed document (positions) and the decrypted one (values).
func newStore(file string, data []byte, recipients []string, enc, dec *document) (*Store, error) {
	s := &Store{file: file, digest: contentDigest(data), recipients: recipients, entries: map[string]entry{}}
	for _, path := range slices.Sorted(maps.Keys(dec.entries)) {
		l := dec.entries[path]
		pos, ok := enc.entries[path]
		if !ok {
			return nil, &Error{Class: ClassMalformed, File: file, Entry: path,
				Message: "the decrypted document does not match the committed one"}
		}
		s.entries[path] = entry{section: l.section, name: l.name, value: New(l.value), line: pos.line, column: pos.column}
	}
	return s, nil
}

// File returns the file name the Store was decrypted from, as the caller named it.
func (s *Store) File() string {
	if s == nil {
		return ""
	}
	return s.file
}

// Digest returns "sha256:<hex>" of the encrypted file's bytes: two Stores with the same digest hold the same
// secrets. It identifies a version of the file without revealing anything.
func (s *Store) Digest() string {
	if s == nil {
		return ""
	}
	return s.digest
}

// Recipients returns the age recipients (public keys) the file is encrypted to, sorted.
func (s *Store) Recipients() []string {
	if s == nil {
		return nil
	}
	return slices.Clone(s.recipients)
}

// Names returns the sorted names of the entries of one block.
func (s *Store) Names(section Section) []string {
	if s == nil {
		return nil
	}
	var out []string
	for _, e := range s.entries {
		if e.section == string(section) {
			out = append(out, e.name)
		}
	}
	slices.Sort(out)
	return out
}

// Secret returns secrets.<name>.
func (s *Store) Secret(name string) (Value, error) { return s.lookup(keySecrets, name) }

// SSHKey returns cloud-init.ssh-keys.<name>, one OpenSSH public-key line.
func (s *Store) SSHKey(name string) (Value, error) { return s.lookup(string(SSHKeys), name) }

// Password returns cloud-init.passwords.<name>.
func (s *Store) Password(name string) (Value, error) { return s.lookup(string(Passwords), name) }

// Resolve resolves a manifest reference (cloud-init.ssh-keys.<name> or cloud-init.passwords.<name>); field
// names the manifest field that holds the reference, for the error.
func (s *Store) Resolve(ref, field string) (Value, error) {
	r, err := ParseRef(ref)
	if err != nil {
		return Value{}, WithField(err, field)
	}
	v, err := s.lookup(string(r.Section), r.Name)
	return v, WithField(err, field)
}

// ResolvePassword resolves a ci-password-ref, which must name a cloud-init.passwords entry.
func (s *Store) ResolvePassword(ref, field string) (Value, error) {
	r, err := ParseRef(ref)
	if err == nil && r.Section != Passwords {
		err = &Error{Class: ClassBadReference, Message: fmt.Sprintf(
			"reference %s names an SSH key where a cloud-init.passwords.<name> reference is expected", quoteInput(ref))}
	}
	if err != nil {
		return Value{}, WithField(err, field)
	}
	return s.Resolve(ref, field)
}

// SSHKeySet is the resolution of a manifest's ssh-key-refs: the key lines in manifest order with duplicate
// values dropped, and their digest (inventory.SSHKeysDigest), which is what a plan carries and compares.
type SSHKeySet struct {
	Keys   []Value
	Digest string
}

// Joined returns the key lines joined by newlines: the sshkeys value PVE stores, before percent-encoding.
func (k SSHKeySet) Joined() Value {
	lines := make([]string, len(k.Keys))
	for i, v := range k.Keys {
		lines[i] = v.Reveal()
	}
	return New(strings.Join(lines, "\n"))
}

// ResolveSSHKeys resolves ssh-key-refs. field is the manifest field holding the list
// (spec.cloud-init-data.ssh-key-refs); each error names its element (field[i]). Every bad or missing
// reference is reported, joined with errors.Join; on any error no keys are returned.
func (s *Store) ResolveSSHKeys(refs []string, field string) (SSHKeySet, error) {
	var errs []error
	var set SSHKeySet
	var lines []string
	seen := map[string]bool{}
	for i, ref := range refs {
		elem := fmt.Sprintf("%s[%d]", field, i)
		r, err := ParseRef(ref)
		if err == nil && r.Section != SSHKeys {
			err = &Error{Class: ClassBadReference, Message: fmt.Sprintf(
				"reference %s names a password where a cloud-init.ssh-keys.<name> reference is expected", quoteInput(ref))}
		}
		if err != nil {
			errs = append(errs, WithField(err, elem))
			continue
		}
		v, err := s.lookup(string(SSHKeys), r.Name)
		if err != nil {
			errs = append(errs, WithField(err, elem))
			continue
		}
		norm := strings.Join(strings.Fields(v.Reveal()), " ")
		if seen[norm] {
			continue
		}
		seen[norm] = true
		set.Keys = append(set.Keys, v)
		lines = append(lines, norm)
	}
	if len(errs) > 0 {
		return SSHKeySet{}, errors.Join(errs...)
	}
	set.Digest = inventory.SSHKeysDigest(lines)
	return set, nil
}

// lookup returns the named entry of a block, failing closed when the store, the entry or its value is absent.
func (s *Store) lookup(section, name string) (Value, error) {
	path := entryPath(section, name)
	if s == nil {
		return Value{}, &Error{Class: ClassMissingEntry, Entry: path,
			Message: "the cluster has no secrets-file to resolve it from; proxops fails closed"}
	}
	e, ok := s.entries[path]
	if !ok {
		return Value{}, &Error{Class: ClassMissingEntry, File: s.file, Entry: path,
			Message: "no such entry in the secrets file; proxops fails closed"}
	}
	if e.value.IsEmpty() {
		return Value{}, &Error{Class: ClassMissingEntry, File: s.file, Line: e.line, Column: e.column, Entry: path,
			Message: "the entry is empty; proxops fails closed"}
	}
	return e.value, nil
}
