package secrets

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const goodKey = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIM+CnbzVHIYA0j9xiZSgcMsuBiQgZzbCVv565twdTI65 lab-deploy@proxops.invalid"

func TestParseDocumentShapes(t *testing.T) {
	tests := []struct {
		name    string
		doc     string
		entries map[string]string // path → value
		errs    []string          // expected messages, in order
	}{
		{name: "empty blocks", doc: "secrets:\ncloud-init:\n", entries: map[string]string{}},
		{name: "explicit nulls and empty blocks", doc: "secrets: ~\ncloud-init:\n  ssh-keys: {}\n  passwords:\n",
			entries: map[string]string{}},
		{name: "scalars of every type", doc: "secrets:\n  s: text\n  n: 8006\n  f: 1.5\n  b: true\n  e: \"\"\n  z: ~\n",
			entries: map[string]string{"secrets.s": "text", "secrets.n": "8006", "secrets.f": "1.5", "secrets.b": "true",
				"secrets.e": "", "secrets.z": ""}},
		{name: "unknown blocks are ignored", doc: "secrets: {a: b}\nother: [1]\ncloud-init:\n  users: {x: y}\n",
			entries: map[string]string{"secrets.a": "b"}},
		{name: "ssh key with options and surrounding space",
			doc:     "cloud-init:\n  ssh-keys:\n    k: '  no-pty,no-agent-forwarding " + goodKey + "  '\n",
			entries: map[string]string{"cloud-init.ssh-keys.k": "no-pty,no-agent-forwarding " + goodKey}},
		{name: "duplicate names", doc: "secrets:\n  a: x\n  a: y\n",
			errs: []string{"f:3:3: secrets.a: defined more than once"}},
		{name: "duplicate top-level block", doc: "secrets: {a: x}\nsecrets: {b: y}\n",
			errs: []string{"f:2:1: top-level key secrets: appears more than once"}},
		{name: "alias value", doc: "secrets:\n  a: &x value\n  b: *x\n",
			errs: []string{"f:3:3: secrets.b: must be a single value (a string or a number), found a YAML alias (aliases are not supported here)"}},
		{name: "complex key", doc: "secrets:\n  ? [a]\n  : b\n",
			errs: []string{"f:2:5: secrets: has an entry without a plain, non-empty name"}},
		{name: "secrets as a list", doc: "secrets: [a, b]\n",
			errs: []string{"f:1:10: secrets: must be a mapping of name to value, found a list"}},
		{name: "cloud-init as a value", doc: "cloud-init: keys\n",
			errs: []string{"f:1:13: cloud-init: must be a mapping with ssh-keys: and/or passwords:, found a single value"}},
		{name: "passwords nested", doc: "cloud-init:\n  passwords:\n    default:\n      a: b\n",
			errs: []string{"f:3:5: cloud-init.passwords.default: must be a single value (a string or a number), found a mapping"}},
		{name: "name too long", doc: "cloud-init:\n  passwords:\n    " + strings.Repeat("a", 65) + ": x\n",
			errs: []string{`f:3:5: cloud-init.passwords: entry "` + strings.Repeat("a", 65) + `": the name is longer than 64 characters`}},
		{name: "multi-line ssh key", doc: "cloud-init:\n  ssh-keys:\n    k: |\n      " + goodKey + "\n      " + goodKey + "\n",
			errs: []string{"f:3:5: cloud-init.ssh-keys.k: must be one OpenSSH public-key line, found several lines"}},
		{name: "ssh key blob of another type", doc: "cloud-init:\n  ssh-keys:\n    k: " + strings.Replace(goodKey, "ssh-ed25519", "ssh-rsa", 1) + "\n",
			errs: []string{"f:3:5: cloud-init.ssh-keys.k: is not an OpenSSH public-key line: no key type followed by a matching base64 key blob"}},
		{name: "several problems in position order", doc: "secrets:\n  b: [1]\n  a: {x: 1}\ncloud-init:\n  ssh-keys:\n    UP: x\n",
			errs: []string{
				"f:2:3: secrets.b: must be a single value (a string or a number), found a list",
				"f:3:3: secrets.a: must be a single value (a string or a number), found a mapping",
				`f:6:5: cloud-init.ssh-keys: entry "UP": the name must match [a-z0-9][a-z0-9-]* (lower-case letters, digits and dashes, not starting with a dash)`,
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			doc, err := parseDocument("f", []byte(tt.doc), true)
			var msgs []string
			if err != nil {
				for _, e := range unjoin(err) {
					if !errors.Is(e, ErrMalformed) {
						t.Errorf("not malformed: %v", e)
					}
					msgs = append(msgs, e.Error())
				}
			}
			if d := cmp.Diff(tt.errs, msgs); d != "" {
				t.Errorf("errors (-want +got):\n%s", d)
			}
			if tt.entries == nil {
				return
			}
			got := map[string]string{}
			for path, l := range doc.entries {
				got[path] = l.value
			}
			if d := cmp.Diff(tt.entries, got); d != "" {
				t.Errorf("entries (-want +got):\n%s", d)
			}
		})
	}
}

func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// FuzzParseDocument feeds arbitrary YAML to the secrets-document parser, committed and decrypted mode alike.
func FuzzParseDocument(f *testing.F) {
	seeds, _ := filepath.Glob("testdata/*.yaml")
	more, _ := filepath.Glob("testdata/plain/*.yaml")
	for _, path := range append(seeds, more...) {
		if data, err := os.ReadFile(path); err == nil {
			f.Add(data, true)
			f.Add(data, false)
		}
	}
	f.Add([]byte("secrets:\n  a: &x 1\n  b: *x\ncloud-init: {ssh-keys: {k: '"+goodKey+"'}}\n"), true)
	f.Add([]byte("--- \n- a\n---\nb: c\n"), false)
	f.Add([]byte("cloud-init:\n  passwords:\n    ? [x]\n    : y\n"), true)
	f.Fuzz(func(t *testing.T, data []byte, plaintext bool) {
		doc, err := parseDocument("f", data, plaintext)
		doc2, err2 := parseDocument("f", data, plaintext)
		if (err == nil) != (err2 == nil) || err != nil && err.Error() != err2.Error() || (doc == nil) != (doc2 == nil) {
			t.Fatalf("not deterministic: %v / %v", err, err2)
		}
		if err != nil {
			for _, e := range unjoin(err) {
				var se *Error
				if !errors.As(e, &se) || se.Class != ClassMalformed || se.File != "f" {
					t.Fatalf("unclassified error %#v", e)
				}
			}
		}
		if doc == nil {
			if err == nil {
				t.Fatal("no document and no error")
			}
			return
		}
		if err == nil && !doc.hasSecrets && !doc.hasCloudInit {
			t.Fatal("accepted a document with neither block")
		}
		for path, l := range doc.entries {
			if path != entryPath(l.section, l.name) || l.line < 1 || l.column < 1 {
				t.Fatalf("entry %q: %+v", path, l)
			}
			if l.section != keySecrets && !ValidName(l.name) {
				t.Fatalf("accepted the cloud-init name %q", l.name)
			}
			if plaintext && l.section == string(SSHKeys) && l.value != "" && checkSSHKeyLine(l.value) != "" {
				t.Fatalf("accepted the SSH key %q", l.value)
			}
		}
	})
}
