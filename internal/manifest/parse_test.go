package manifest_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"go.yaml.in/yaml/v3"

	"github.com/proxops/proxops/internal/diag"
	"github.com/proxops/proxops/internal/manifest"
	"github.com/proxops/proxops/internal/testcorpus"
	"github.com/proxops/proxops/internal/yamldecode"
)

func lines(l diag.List) string {
	var out []string
	for _, d := range l.Sorted() {
		out = append(out, d.String())
	}
	return strings.Join(out, "\n")
}

func TestParseReadsEveryDocumentAndSkipsEmptyOnes(t *testing.T) {
	src := `---
# nothing here
---
apiVersion: proxops/v1alpha1
kind: iso
metadata: {name: a}
spec: {nodes: [pve1], storage: local, filename: a.iso, url: "https://example.invalid/a.iso"}
---
---
apiVersion: proxops/v1alpha1
kind: CTT
metadata: {name: b}
spec: {node: pve1, storage: local, filename: b.tar.zst, url: "https://example.invalid/b.tar.zst"}
`
	rs, diags := manifest.Parse("iso/base/a.yaml", []byte(src))
	if len(diags) != 0 {
		t.Fatalf("diagnostics:\n%s", lines(diags))
	}
	if len(rs) != 2 || rs[0].Ref().String() != "ISO/a" || rs[1].Ref().String() != "CTTemplate/b" {
		t.Fatalf("resources = %v", rs)
	}
	if rs[0].Source.Document != 2 || rs[1].Source.Document != 4 {
		t.Errorf("document indexes = %d, %d; want 2, 4", rs[0].Source.Document, rs[1].Source.Document)
	}
	if p := rs[1].Source.Pos("spec.filename"); p != (yamldecode.Pos{Line: 13, Column: 46}) {
		t.Errorf("position of spec.filename = %+v", p)
	}
}

func TestUnknownFieldsAreWarningsNamingTheFieldMeant(t *testing.T) {
	src := head + `kind: VM
metadata: {name: web}
spec:
  node: pve1
  vmid: 100
  memroy: 1GiB
  memory: 1GiB
  cpu: {type: host, cores: 1, flagz: [x]}
  disks: [{storage: local, size: 8GiB, Interface: scsi0}]
  totally-new: true
`
	_, diags := manifest.Parse("vm/base/web.yaml", []byte(src))
	want := strings.Join([]string{
		`vm/base/web.yaml:7:3: warning: VM/web: spec.memroy: unknown field; did you mean "memory"?`,
		`vm/base/web.yaml:9:31: warning: VM/web: spec.cpu.flagz: unknown field; did you mean "flags"?`,
		`vm/base/web.yaml:10:40: warning: VM/web: spec.disks[0].Interface: unknown field; did you mean "interface"?`,
		`vm/base/web.yaml:11:3: warning: VM/web: spec.totally-new: unknown field`,
	}, "\n")
	if got := lines(diags); got != want {
		t.Errorf("diagnostics:\n%s\nwant:\n%s", got, want)
	}
}

func TestBooleansAcceptYAML11WordsButNotQuotedStrings(t *testing.T) {
	src := head + `kind: LXC
metadata: {name: ct}
spec:
  node: pve1
  vmid: 200
  template: base
  memory: 512MiB
  cpu: {cores: 1}
  root: {storage: local, size: 8GiB}
  options: {unprivileged: yes, onboot: Off, protection: false, nesting: "true"}
`
	rs, diags := manifest.Parse("lxc/base/ct.yaml", []byte(src))
	if got, want := lines(diags), `lxc/base/ct.yaml:11:73: LXC/ct: spec.options.nesting: expected true or false, got "true"`; got != want {
		t.Errorf("diagnostics:\n%s\nwant:\n%s", got, want)
	}
	o := rs[0].LXC().Options
	if !manifest.IsTrue(o.Unprivileged) || o.OnBoot == nil || *o.OnBoot || o.Protection == nil || *o.Protection || o.Nesting != nil {
		t.Errorf("options = %+v", o)
	}
}

func TestAnchorsAndMergeKeysAreResolved(t *testing.T) {
	src := head + `kind: VM
metadata: {name: web}
spec:
  node: pve1
  vmid: 100
  memory: 1GiB
  cpu: {type: host, cores: 1}
  disks:
    - &disk {storage: local, size: 8GiB, iothread: true}
    - <<: *disk
      interface: scsi1
      size: 16GiB
`
	r := parseOne(t, src)
	d := r.VM().Disks[1]
	if d.Storage != "local" || d.Size != "16GiB" || d.Interface != "scsi1" || !manifest.IsTrue(d.IOThread) {
		t.Errorf("merged disk = %+v", d)
	}
}

// TestRenderedManifestsParseBackUnchanged checks that a resource built in code renders with yaml.Marshal into
// a manifest that parses back to the same value, as adoption needs.
func TestRenderedManifestsParseBackUnchanged(t *testing.T) {
	built := []*manifest.Resource{{
		APIVersion: manifest.APIVersion, Kind: manifest.KindVM,
		Metadata: manifest.Metadata{Name: "web", Labels: map[string]string{"role": "web"}},
		Spec: &manifest.VMSpec{
			Node: "pve1", VMID: 100, State: manifest.StateStopped, Tags: []string{"prod"},
			CPU: manifest.VMCPU{Type: "host", Cores: 2}, Memory: manifest.FormatBytes(4 << 30),
			Disks:    []manifest.Disk{{Storage: "local-lvm", Size: "32GiB", Interface: "scsi0", IOThread: manifest.Bool(true), SSD: manifest.Bool(false)}},
			Networks: []manifest.NIC{{Bridge: "vmbr0", VLAN: manifest.Int(0), Firewall: manifest.Bool(true)}},
			Hardware: &manifest.Hardware{BIOS: "ovmf", EFIDisk: &manifest.EFIDisk{Storage: "local-lvm", Template: "4m"},
				TPM: &manifest.TPM{Version: "v2.0"}, CDROM: &manifest.CDROM{ISO: manifest.CDROMNone},
				PCIDevices: []manifest.PCIDevice{{Slot: "hostpci0", Device: "0000:01:00", PCIe: manifest.Bool(true)}}},
			Options:       &manifest.VMOptions{OnBoot: manifest.Bool(true), Tablet: manifest.Bool(false), BootOrder: []string{"scsi0", "net0"}},
			CloudInitData: &manifest.CloudInitData{CIUser: "ops", SSHKeyRefs: []string{"cloud-init.ssh-keys.main"}, IPConfigs: []manifest.IPConfig{{NIC: 0, IP: "192.0.2.10/24", Gateway: "192.0.2.1"}}},
			Extra:         map[string]string{"watchdog": "i6300esb"},
		},
	}, {
		APIVersion: manifest.APIVersion, Kind: manifest.KindTemplateCT, Metadata: manifest.Metadata{Name: "ct"},
		Spec: &manifest.LXCSpec{Node: "pve1", VMID: 910, Template: "base", Memory: "1GiB", Swap: "0",
			CPU: manifest.LXCCPU{Cores: 1}, Root: manifest.RootFS{Storage: "local", Size: "8GiB"},
			MountPoints: []manifest.MountPoint{{Storage: "local", Size: "1GiB", MountPoint: "/data", Options: &manifest.MountOptions{Backup: manifest.Bool(false)}}},
			BindMounts:  []manifest.BindMount{{HostPath: "/srv/x", MountPoint: "/x", ReadOnly: manifest.Bool(true)}},
			Networks:    []manifest.LXCNIC{{Bridge: "vmbr0", Tag: manifest.Int(20), IP: "dhcp"}},
			DNS:         &manifest.DNS{Nameservers: []string{"192.0.2.53"}}, Arch: "amd64",
			Options: &manifest.LXCOptions{Unprivileged: manifest.Bool(true), Nesting: manifest.Bool(false)}},
	}, {
		APIVersion: manifest.APIVersion, Kind: manifest.KindDiskImage, Metadata: manifest.Metadata{Name: "img"},
		Spec: &manifest.ArtifactSpec{Nodes: []string{"pve1"}, Storage: "local", Filename: "img.qcow2", URL: "https://example.invalid/img.qcow2",
			Checksum: &manifest.Checksum{Algorithm: "sha256", Value: strings.Repeat("ab", 32)}},
	}}
	for _, r := range built {
		if diags := manifest.Validate(r); len(diags) != 0 {
			t.Fatalf("%s does not validate:\n%s", r.Ref(), lines(diags))
		}
		out, err := yaml.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		back, diags := manifest.Parse("x.yaml", out)
		if len(diags) != 0 || len(back) != 1 {
			t.Fatalf("rendered %s does not parse back:\n%s\n%s", r.Ref(), out, lines(diags))
		}
		if diff := cmp.Diff(r, back[0], cmpopts.IgnoreFields(manifest.Resource{}, "Source")); diff != "" {
			t.Errorf("%s round trip (-built +parsed):\n%s\nrendered:\n%s", r.Ref(), diff, out)
		}
	}
}

func TestValidateReportsResourcesBuiltWithoutPositions(t *testing.T) {
	r := &manifest.Resource{APIVersion: manifest.APIVersion, Kind: manifest.KindVM, Metadata: manifest.Metadata{Name: "x"},
		Spec: &manifest.VMSpec{Node: "pve1", VMID: 100, CPU: manifest.VMCPU{Type: "host", Cores: -1}, Memory: "1GiB"}}
	got := lines(manifest.Validate(r))
	if got != "VM/x: spec.cpu.cores: must be greater than zero (leave it out for PVE's default: one core per socket)" {
		t.Errorf("Validate() = %q", got)
	}
}

func TestValidateNamesTheSpecAKindNeeds(t *testing.T) {
	for _, tc := range []struct {
		kind manifest.Kind
		spec manifest.Spec
		want string
	}{
		{manifest.KindLXC, &manifest.VMSpec{}, "LXC/x: spec: an LXC needs a container spec"},
		{manifest.KindTemplateVM, &manifest.LXCSpec{}, "TemplateVM/x: spec: a TemplateVM needs a VM spec"},
		{manifest.KindPool, &manifest.ArtifactSpec{}, "Pool/x: spec: a Pool needs a pool spec"},
		{manifest.KindISO, &manifest.PoolSpec{}, "ISO/x: spec: an ISO needs an artifact spec"},
		{manifest.KindAlias, &manifest.IPSetSpec{}, "Alias/x: spec: an Alias needs an alias spec"},
		{"Widget", &manifest.PoolSpec{}, "Widget/x: kind: unknown kind \"Widget\""},
	} {
		r := &manifest.Resource{APIVersion: manifest.APIVersion, Kind: tc.kind, Metadata: manifest.Metadata{Name: "x"}, Spec: tc.spec}
		if got := lines(manifest.Validate(r)); got != tc.want {
			t.Errorf("Validate(%s with %T) = %q, want %q", tc.kind, tc.spec, got, tc.want)
		}
	}
}

func TestEveryKindParsesIntoItsOwnSpec(t *testing.T) {
	for _, k := range manifest.Kinds {
		src := "apiVersion: " + manifest.APIVersion + "\nkind: " + string(k) + "\nmetadata:\n  name: x\nspec:\n  comment: c\n"
		rs, _ := manifest.Parse("x.yaml", []byte(src))
		if len(rs) != 1 || rs[0].Spec == nil {
			t.Fatalf("%s: parsed %d resources, want one with a spec", k, len(rs))
		}
		for _, d := range manifest.Validate(rs[0]) {
			if d.Field == "spec" || d.Field == "kind" {
				t.Errorf("%s parses into %T, which its validation refuses: %s", k, rs[0].Spec, d)
			}
		}
	}
}

func TestValidateReportsASlotTakenTwiceAtTheSecondDevice(t *testing.T) {
	vm := &manifest.Resource{APIVersion: manifest.APIVersion, Kind: manifest.KindVM, Metadata: manifest.Metadata{Name: "x"},
		Spec: &manifest.VMSpec{Node: "pve1", VMID: 100, CPU: manifest.VMCPU{Type: "host", Cores: 1}, Memory: "1GiB",
			Networks: []manifest.NIC{{Bridge: "vmbr0"}, {Bridge: "vmbr1", Slot: "net0"}},
			Hardware: &manifest.Hardware{PCIDevices: []manifest.PCIDevice{{Slot: "hostpci1", Device: "01:00.0"}, {Slot: "hostpci1", Device: "02:00.0"}}}}}
	want := "VM/x: spec.hardware.pci-devices[1].slot: slot hostpci1 is already used by spec.hardware.pci-devices[0]\n" +
		"VM/x: spec.networks[1].slot: slot net0 is already used by spec.networks[0]"
	if got := lines(manifest.Validate(vm)); got != want {
		t.Errorf("Validate(VM) =\n%s\nwant\n%s", got, want)
	}
	ct := &manifest.Resource{APIVersion: manifest.APIVersion, Kind: manifest.KindLXC, Metadata: manifest.Metadata{Name: "x"},
		Spec: &manifest.LXCSpec{Node: "pve1", VMID: 101, Template: "base", Root: manifest.RootFS{Storage: "local", Size: "8GiB"},
			Networks: []manifest.LXCNIC{{Bridge: "vmbr0", Slot: "net1"}, {Bridge: "vmbr0"}}}}
	want = "LXC/x: spec.networks[1].slot: slot net1 is already used by spec.networks[0]"
	if got := lines(manifest.Validate(ct)); got != want {
		t.Errorf("Validate(LXC) =\n%s\nwant\n%s", got, want)
	}
}

func TestEveryUpstreamExampleManifestParsesCleanly(t *testing.T) {
	root := testcorpus.Dir("upstream-examples")
	for _, dir := range manifest.KindRoots {
		files, _ := filepath.Glob(filepath.Join(root, dir, "*", "*.yaml"))
		for _, f := range files {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			rs, diags := manifest.Parse(f, data)
			if len(diags) != 0 || len(rs) != 1 {
				t.Errorf("%s: %d resources\n%s", f, len(rs), lines(diags))
			}
		}
	}
}

func TestLegacyFieldsOfOldExamplesAreUnknownFieldWarnings(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(testcorpus.Dir("upstream-examples"), "golden-base.ctt.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	_, diags := manifest.Parse("ctt/base/golden-base.yaml", data)
	var warned []string
	for _, d := range diags {
		if d.Severity == diag.Warning {
			warned = append(warned, d.Field)
		}
	}
	if diff := cmp.Diff([]string{"spec.vmid", "spec.source", "spec.pve-description"}, warned); diff != "" {
		t.Errorf("warned fields (-want +got):\n%s", diff)
	}
}

// What PVE lets a guest lack is optional in a manifest: an existing guest may have no template on record
// (containers), no cores, no memory and no disks. What creating needs is listed by MissingToCreate, and an
// explicit zero is still an error.
func TestValidateAcceptsWhatPVELetsAGuestLackAndListsWhatCreatingNeeds(t *testing.T) {
	src := `apiVersion: proxops/v1alpha1
kind: LXC
metadata: {name: cache}
spec: {node: pve1, vmid: 200, root: {storage: local-lvm, size: 8GiB}}
---
apiVersion: proxops/v1alpha1
kind: VM
metadata: {name: tiny}
spec: {node: pve1, vmid: 100, cpu: {type: host}}
---
apiVersion: proxops/v1alpha1
kind: LXC
metadata: {name: zero}
spec: {node: pve1, vmid: 201, template: debian, memory: "", cpu: {cores: 0}, root: {storage: local-lvm, size: 8GiB}}
`
	rs, diags := manifest.Parse("x.yaml", []byte(src))
	want := "x.yaml:14:57: LXC/zero: spec.memory: required\nx.yaml:14:74: LXC/zero: spec.cpu.cores: must be greater than zero (leave it out for PVE's default: every core of the host)"
	if got := lines(diags); len(rs) != 3 || got != want {
		t.Fatalf("parse: %d resources, diagnostics\n%s\nwant\n%s", len(rs), got, want)
	}
	var missing []string
	for _, r := range rs {
		for _, m := range r.MissingToCreate() {
			missing = append(missing, r.Ref().String()+" "+m.Field)
		}
	}
	if got := strings.Join(missing, ", "); got != "LXC/cache spec.template, VM/tiny spec.disks" {
		t.Errorf("MissingToCreate = %q", got)
	}
}

func TestFileThatIsNotAManifestIsNotQuoted(t *testing.T) {
	for _, src := range []string{
		"AGE-SECRET-KEY-1QQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQ\n",
		"# created: 2024-01-01\nAGE-SECRET-KEY-1ABCDEF\n",
		"PVE_TOKEN=deadbeef-0000-4000-8000-000000000000\n",
	} {
		_, diags := manifest.Parse("vm/lab/web.yaml", []byte(src))
		got := lines(diags)
		if !strings.Contains(got, "expected a manifest (a mapping with apiVersion, kind, metadata and spec), got a scalar value") {
			t.Errorf("Parse(%q) = %q, want the shape of the document", src, got)
		}
		if strings.Contains(got, "AGE-SECRET") || strings.Contains(got, "deadbeef") {
			t.Errorf("Parse(%q) quotes the file: %q", src, got)
		}
	}
}

// An unknown key in a VM's cloud-init data, in one of its ipconfigs or in its cloud-init drive is a warning
// at its position, like any unknown field (validate --strict turns it into an error).
func TestUnknownCloudInitKeysAreWarningsAtTheirPosition(t *testing.T) {
	src := head + `kind: VM
metadata: {name: web}
spec:
  node: pve1
  vmid: 100
  cpu: {type: host}
  cloud-init-data:
    ci-user: deploy
    ci-usr: deploy
    ipconfigs: [{nic: 0, ip: 192.0.2.10/24, gw: 192.0.2.1}]
  hardware:
    cloud-init: {enabled: true, storage: local-lvm, format: qcow2}
`
	_, diags := manifest.Parse("vm/base/web.yaml", []byte(src))
	want := strings.Join([]string{
		`vm/base/web.yaml:10:5: warning: VM/web: spec.cloud-init-data.ci-usr: unknown field; did you mean "ci-user"?`,
		`vm/base/web.yaml:11:45: warning: VM/web: spec.cloud-init-data.ipconfigs[0].gw: unknown field; did you mean "ip"?`,
		`vm/base/web.yaml:13:53: warning: VM/web: spec.hardware.cloud-init.format: unknown field`,
	}, "\n")
	if got := lines(diags); got != want {
		t.Errorf("diagnostics:\n%s\nwant:\n%s", got, want)
	}
}
