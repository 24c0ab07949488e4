package secrets

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"filippo.io/age"
)

// The environment variables that supply age identities, as the sops command reads them.
const (
	// EnvAgeKeyFile names a file of age identities, one per line ('#' comments allowed).
	EnvAgeKeyFile = "SOPS_AGE_KEY_FILE"
	// EnvAgeKey holds age identities directly, one per line.
	EnvAgeKey = "SOPS_AGE_KEY"
)

// KeySource supplies the age identities (private keys) decryption may use. It is asked on every decryption
// that is not served from a Decryptor's cache, so a key file that changed is read again without a restart.
type KeySource interface {
	AgeKeys() (*AgeKeys, error)
}

// AgeKeys is a set of age identities. One set may hold several identities (one per cluster, say): a file
// decrypts when any of them matches one of its recipients. It never prints key material: fmt shows only how
// many identities it holds and where they came from.
type AgeKeys struct {
	ids     []age.Identity
	origins []string
}

// ParseAgeKeys parses age identities, one per line; empty lines and lines starting with '#' are skipped (the
// format of age-keygen's output and of SOPS_AGE_KEY_FILE). origin says where the text came from, for
// messages. A line that is not an identity is an error naming its number, never its content.
func ParseAgeKeys(origin string, text []byte) (*AgeKeys, error) {
	k := &AgeKeys{}
	for i, line := range strings.Split(string(text), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		ids, err := age.ParseIdentities(strings.NewReader(line))
		if err != nil || len(ids) != 1 {
			return nil, &Error{Class: ClassNoKey, Message: fmt.Sprintf(
				"%s: line %d is not an age identity (want AGE-SECRET-KEY-1...)", origin, i+1)}
		}
		k.ids = append(k.ids, ids[0])
	}
	if len(k.ids) > 0 {
		k.origins = []string{origin}
	}
	return k, nil
}

// Len returns the number of identities.
func (k *AgeKeys) Len() int {
	if k == nil {
		return 0
	}
	return len(k.ids)
}

// Origins returns where the identities came from (environment variable names and file paths, never keys).
func (k *AgeKeys) Origins() []string {
	if k == nil {
		return nil
	}
	return append([]string(nil), k.origins...)
}

// Recipients returns the public keys (age1...) of the set's identities, in order: what a set can decrypt,
// without key material, e.g. to notice that a key file changed.
func (k *AgeKeys) Recipients() []string {
	if k == nil {
		return nil
	}
	out := make([]string, 0, len(k.ids))
	for _, id := range k.ids {
		if x, ok := id.(*age.X25519Identity); ok {
			out = append(out, x.Recipient().String())
		}
	}
	return out
}

// AgeKeys implements KeySource: a parsed set is a fixed key source (the form tests inject).
func (k *AgeKeys) AgeKeys() (*AgeKeys, error) { return k, nil }

// String describes the set without key material.
func (k AgeKeys) String() string {
	if len(k.ids) == 0 {
		return "no age identities"
	}
	noun := "identities"
	if len(k.ids) == 1 {
		noun = "identity"
	}
	return fmt.Sprintf("%d age %s from %s", len(k.ids), noun, strings.Join(k.origins, ", "))
}

// Format makes every fmt verb print String, so a set of private keys is never dumped by reflection.
func (k AgeKeys) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(k.String())) }

// merge appends o's identities to k.
func (k *AgeKeys) merge(o *AgeKeys) {
	k.ids = append(k.ids, o.ids...)
	k.origins = append(k.origins, o.origins...)
}

// FromEnvironment returns the key source the sops command uses, reading the environment through lookup
// (os.LookupEnv in production; a map in tests, so no test touches the process environment):
// the identities in SOPS_AGE_KEY, then those in the file SOPS_AGE_KEY_FILE names; when neither is set, the
// sops default key file <user config dir>/sops/age/keys.txt if it exists ($XDG_CONFIG_HOME, else
// $HOME/.config). A variable that is set but unusable (a missing file, a line that is not an identity) is
// an error of class ClassNoKey naming the variable and the path.
//
// SOPS_AGE_KEY_CMD and SOPS_AGE_SSH_PRIVATE_KEY_FILE are not supported: ProxOps never runs a command to get
// a key, and SSH keys as age identities are not a documented setup.
func FromEnvironment(lookup func(string) (string, bool)) KeySource {
	return envSource{lookup: lookup}
}

type envSource struct {
	lookup func(string) (string, bool)
}

func (e envSource) AgeKeys() (*AgeKeys, error) {
	keys := &AgeKeys{}
	var errs []error
	text, haveText := e.lookup(EnvAgeKey)
	haveText = haveText && strings.TrimSpace(text) != ""
	if haveText {
		k, err := ParseAgeKeys(EnvAgeKey, []byte(text))
		if err != nil {
			errs = append(errs, err)
		} else {
			keys.merge(k)
		}
	}
	path, havePath := e.lookup(EnvAgeKeyFile)
	havePath = havePath && path != ""
	if havePath {
		k, err := readKeyFile(EnvAgeKeyFile+"="+path, path, false)
		if err != nil {
			errs = append(errs, err)
		} else {
			keys.merge(k)
		}
	}
	if !haveText && !havePath {
		if path := e.defaultKeyFile(); path != "" {
			k, err := readKeyFile(path, path, true)
			if err != nil {
				errs = append(errs, err)
			} else {
				keys.merge(k)
			}
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return keys, nil
}

// KeyFiles returns the files FromEnvironment reads age identities from with this environment: the file
// SOPS_AGE_KEY_FILE names, or, when neither variable is set, the sops default key file (which may not exist).
// A process that watches its inputs watches these.
func KeyFiles(lookup func(string) (string, bool)) []string {
	e := envSource{lookup: lookup}
	if path, ok := lookup(EnvAgeKeyFile); ok && path != "" {
		return []string{path}
	}
	if text, ok := lookup(EnvAgeKey); ok && strings.TrimSpace(text) != "" {
		return nil
	}
	if path := e.defaultKeyFile(); path != "" {
		return []string{path}
	}
	return nil
}

// defaultKeyFile returns the sops default key file path, or "" when no config directory is known.
func (e envSource) defaultKeyFile() string {
	if dir, ok := e.lookup("XDG_CONFIG_HOME"); ok && dir != "" {
		return filepath.Join(dir, "sops", "age", "keys.txt")
	}
	if home, ok := e.lookup("HOME"); ok && home != "" {
		return filepath.Join(home, ".config", "sops", "age", "keys.txt")
	}
	return ""
}

// readKeyFile reads a file of identities. With optional set a missing file is no error.
func readKeyFile(origin, path string, optional bool) (*AgeKeys, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		if optional && errors.Is(err, fs.ErrNotExist) {
			return &AgeKeys{}, nil
		}
		reason := "cannot be read"
		switch {
		case errors.Is(err, fs.ErrNotExist):
			reason = "does not exist"
		case errors.Is(err, fs.ErrPermission):
			reason = "is not readable by this process"
		}
		return nil, &Error{Class: ClassNoKey, Message: fmt.Sprintf("age key file %s %s", origin, reason)}
	}
	return ParseAgeKeys(origin, data)
}
