package repo_test

import (
	"runtime"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/proxops/proxops/internal/diag"
	"github.com/proxops/proxops/internal/repo"
	"github.com/proxops/proxops/internal/yamldecode"
)

// A file of 200,000 tiny documents is refused with an error at the first document beyond the cap, before
// any of it is parsed: loading it allocates little beyond reading the file once (parsing it whole took
// hundreds of bytes per document).
func TestFileOfTwoHundredThousandDocumentsIsRefusedWithBoundedMemory(t *testing.T) {
	fsys := syntheticRepo(4)
	var b strings.Builder
	for range 200000 {
		b.WriteString("---\nkind: VM\n")
	}
	data := []byte(b.String())
	fsys["vm/bench/many.yaml"] = &fstest.MapFile{Data: data}
	fsys["clusters/bench/resources.yaml"] = &fstest.MapFile{Data: append(fsys["clusters/bench/resources.yaml"].Data,
		[]byte("  - ../../vm/bench/many.yaml\n")...)}

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	r := repo.Load(fsys)
	runtime.ReadMemStats(&after)

	var found *diag.Diagnostic
	for _, d := range r.AllDiagnostics() {
		if d.File == "vm/bench/many.yaml" {
			found = &d
		}
	}
	// Document 20,001 starts at the separator on line 2·20,000+1.
	if found == nil || found.Severity != diag.Error || found.Line != 2*yamldecode.MaxDocuments+1 ||
		!strings.Contains(found.Message, "more than 20000 YAML documents in one file") {
		t.Fatalf("diagnostic of the large file: %+v (all: %v)", found, r.AllDiagnostics())
	}
	if r.Valid("bench") {
		t.Fatal("the cluster is valid")
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 2*uint64(len(data)) {
		t.Fatalf("loading allocated %d bytes for a file of %d", got, len(data))
	}
}

// Manifests beyond the repository's cap are refused with an error naming the first of them.
func TestManifestsBeyondTheRepositoryCapAreRefused(t *testing.T) {
	defer repo.SetResourceCap(10)()
	r := repo.Load(syntheticRepo(12))
	var refused []diag.Diagnostic
	for _, d := range r.AllDiagnostics() {
		if strings.Contains(d.Message, "more than 10 manifests in the repository") {
			refused = append(refused, d)
		}
	}
	if len(refused) == 0 || refused[0].Severity != diag.Error || refused[0].Line == 0 || refused[0].File == "" {
		t.Fatalf("refusals: %+v", refused)
	}
	if r.Valid("bench") {
		t.Fatal("the cluster is valid")
	}
}
