package secrets

import (
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/getsops/sops/v3/config"
	sopsyaml "github.com/getsops/sops/v3/stores/yaml"
	"go.yaml.in/yaml/v3"
)

// yamlTreeCases are YAML documents with comments wherever YAML allows them, nested mappings and sequences,
// anchors, several documents and every scalar type.
var yamlTreeCases = []string{
	"",
	"---\n",
	"# only a comment\n",
	"a: 1\n",
	"# head\na: b # line\n# foot\n\nc: d\n",
	"secrets:\n  # the token\n  token: ENC[AES256_GCM,data:x,iv:y,tag:z,type:str] # inline\n  other: v\n# trailing\n",
	"cloud-init:\n  ssh-keys:\n    # admin\n    admin: ssh-ed25519 AAAA\n  passwords: {root: x}\n",
	"list:\n  # before\n  - a # on a\n  - b\n  # after b\n  - [1, 2.5, true, null]\n  - {k: v}\n",
	"n: 12\nf: 1.5\nb: false\nz: ~\nt: 2024-01-02\nq: \"12\"\nbig: 18446744073709551616\nhex: 0x1f\n",
	"anchor: &x {a: 1, b: [2]}\nuse: *x\nscalar: &s hi\nagain: *s\n",
	"a: 1\n---\nb: 2\n---\n# c\n",
	"? complex\n: value\n1: int key\ntrue: bool key\n",
	"multi: |\n  line one\n  line two\nfolded: >\n  a\n  b\n",
	"nested:\n  deeper:\n    # deep head\n    deepest: [x, y] # deep line\n  # foot of deeper\n",
	"- a\n- b\n",
	"just a value\n",
	"a: 1\na: 2\n",
	"a: [unclosed\n",
	"sops:\n  age:\n    - recipient: age1xyz\n      enc: |\n        -----BEGIN AGE ENCRYPTED FILE-----\n        abc\n  lastmodified: \"2024-01-01T00:00:00Z\"\n  mac: ENC[AES256_GCM,data:m,iv:i,tag:t,type:str]\n  version: 3.13.3\n",
}

func checkSameTree(t *testing.T, data []byte) {
	t.Helper()
	ours, ourErr := yamlTreeBranches(data)
	theirs, theirErr := sopsyaml.NewStore(&config.YAMLStoreConfig{}).LoadPlainFile(data)
	if (ourErr == nil) != (theirErr == nil) {
		t.Fatalf("%q: error %v here, %v in sops' store", data, ourErr, theirErr)
	}
	if ourErr == nil && !reflect.DeepEqual(ours, theirs) {
		t.Fatalf("%q: tree\n%#v\nsops' store:\n%#v", data, ours, theirs)
	}
}

func TestEncryptedYAMLIsReadIntoTheTreeSOPSReads(t *testing.T) {
	for _, c := range yamlTreeCases {
		checkSameTree(t, []byte(c))
	}
	files, err := filepath.Glob(filepath.Join("testdata", "*", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	top, _ := filepath.Glob(filepath.Join("testdata", "*.yaml"))
	files = append(files, top...)
	if len(files) < 10 {
		t.Fatalf("only %d fixture files", len(files))
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		checkSameTree(t, data)
	}
}

func FuzzEncryptedYAMLIsReadIntoTheTreeSOPSReads(f *testing.F) {
	for _, c := range yamlTreeCases {
		f.Add([]byte(c))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkSameTree(t, data)
	})
}

// The plaintext rendered from a decrypted tree holds the values sops' store renders (comments aside).
func TestPlaintextRendersTheValuesSOPSRenders(t *testing.T) {
	store := sopsyaml.NewStore(&config.YAMLStoreConfig{})
	for _, c := range yamlTreeCases {
		branches, err := yamlTreeBranches([]byte(c))
		if err != nil || len(branches) == 0 {
			continue
		}
		ours, err := plainYAML(branches)
		if err != nil {
			t.Fatalf("%q: %v", c, err)
		}
		theirs, err := store.EmitPlainFile(branches)
		if err != nil {
			t.Fatalf("%q: sops' store: %v", c, err)
		}
		if a, b := decodeAll(t, ours), decodeAll(t, theirs); !reflect.DeepEqual(a, b) {
			t.Errorf("%q: plaintext\n%s\nsops' store:\n%s", c, ours, theirs)
		}
	}
}

func decodeAll(t *testing.T, data []byte) []any {
	t.Helper()
	var out []any
	dec := yaml.NewDecoder(strings.NewReader(string(data)))
	for {
		var v any
		if err := dec.Decode(&v); err != nil {
			if errors.Is(err, io.EOF) {
				return out
			}
			t.Fatalf("decode %q: %v", data, err)
		}
		out = append(out, v)
	}
}

// Decryption must not link sops' configuration package: it brings cloud storage and gRPC clients into every
// service binary, about 15 MB of resident memory each.
func TestDecryptionLinksNoSOPSConfigurationOrCloudStorage(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, banned := range []string{"github.com/getsops/sops/v3/config", "github.com/getsops/sops/v3/publish",
		"cloud.google.com/go/storage", "google.golang.org/grpc/xds"} {
		for _, dep := range strings.Fields(string(out)) {
			if dep == banned {
				t.Errorf("internal/secrets depends on %s", banned)
			}
		}
	}
}
