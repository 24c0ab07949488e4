package manifest_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/proxops/proxops/internal/diag"
	"github.com/proxops/proxops/internal/manifest"
	"github.com/proxops/proxops/internal/testcorpus"
)

// FuzzParse feeds arbitrary bytes to the manifest parser: it must not panic, every error must carry a line,
// and every resource returned must have a canonical kind and a name.
func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join(testcorpus.Dir("upstream-examples"), "*", "*", "*.yaml"))
	top, _ := filepath.Glob(filepath.Join(testcorpus.Dir("upstream-examples"), "*.yaml"))
	for _, p := range append(files, top...) {
		if data, err := os.ReadFile(p); err == nil {
			f.Add(data)
		}
	}
	f.Add([]byte("a: &a [*a]\n"))
	f.Add([]byte("kind: VM\nmetadata: {name: x}\nspec: {disks: [{<<: {size: 1}}]}\n"))
	f.Add([]byte("---\n- 1\n---\n\"x\"\n"))
	f.Add([]byte("apiVersion: proxops/v1alpha1\nkind: HARule\nmetadata: {name: pin}\nspec:\n  type: node-affinity\n  resources: [web, LXC/db]\n  nodes: [{node: pve1, priority: 2}, {node: pve2}]\n"))
	f.Add([]byte("apiVersion: proxops/v1alpha1\nkind: VM\nmetadata: {name: web}\nspec: {node: pve1, vmid: 100, cpu: {type: host}, state: started, ha: {state: stopped, max-restart: 2}}\n"))
	f.Add([]byte("kind: SecurityGroup\nmetadata: {name: web}\nspec:\n  rules:\n    - {type: in, action: ACCEPT, macro: SSH, source: +admins}\n"))
	f.Add([]byte("kind: IPSet\nmetadata: {name: admins}\nspec:\n  entries: [{cidr: 192.0.2.0/24, nomatch: true}, {cidr: gw}]\n"))
	f.Add([]byte("kind: Alias\nmetadata: {name: gw}\nspec: {name: GW, cidr: 192.0.2.1}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		rs, diags := manifest.Parse("vm/base/fuzz.yaml", data)
		for _, d := range diags {
			if d.Severity == diag.Error && (d.File == "" || d.Line < 1) {
				t.Errorf("error without a position: %s", d)
			}
		}
		for _, r := range rs {
			if _, ok := manifest.ParseKind(string(r.Kind)); !ok || r.Metadata.Name == "" || r.Spec == nil {
				t.Errorf("resource without identity: %+v", r)
			}
			_ = manifest.Resolve(r)
			_ = r.References()
			_ = r.FirewallObjectRefs()
		}
	})
}
