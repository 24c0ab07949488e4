package testcorpus_test

import (
	"os"
	"testing"

	"github.com/proxops/proxops/internal/testcorpus"
)

func TestDirFindsEveryCorpus(t *testing.T) {
	for _, name := range []string{"qemu-server", "pve-container", "field-qemu", "field-lxc", "upstream-examples"} {
		entries, err := os.ReadDir(testcorpus.Dir(name))
		if err != nil {
			t.Fatalf("corpus %s: %v", name, err)
		}
		if len(entries) < 3 {
			t.Fatalf("corpus %s has only %d entries", name, len(entries))
		}
	}
}
