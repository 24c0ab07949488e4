package pvewire_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/proxops/proxops/internal/inventory"
	"github.com/proxops/proxops/internal/manifest"
	"github.com/proxops/proxops/internal/pveformat"
	"github.com/proxops/proxops/internal/pvewire"
)

func TestCreateSizeIsGiBNeverBytes(t *testing.T) {
	for b, want := range map[int64]string{8 << 30: "8", 512 << 20: "0.5", 4 << 20: "0.00390625", 8e9: "7.450580596923828125"} {
		if got := pvewire.CreateSize(b); got != want {
			t.Errorf("CreateSize(%d) = %q, want %q", b, got, want)
		}
		back, err := pvewire.ParseCreateSize(want)
		if err != nil || back != b {
			t.Errorf("ParseCreateSize(%q) = %d, %v; want %d", want, back, err, b)
		}
	}
}

func TestDesiredTags(t *testing.T) {
	for _, tc := range []struct {
		declared []string
		live     string
		want     string
	}{
		{[]string{"web", "prod"}, "old;web", "prod;proxops;web"},
		{nil, "backup;web", "backup;proxops;web"},
		{nil, "pveconform;web", "proxops;web"},
		{nil, "", "proxops"},
		{[]string{"Web"}, "", "proxops;web"},
	} {
		if got := pvewire.DesiredTags(tc.declared, tc.live); got != tc.want {
			t.Errorf("DesiredTags(%v, %q) = %q, want %q", tc.declared, tc.live, got, tc.want)
		}
	}
}

func TestEncodeSSHKeysKeepsOnlyUnreservedCharacters(t *testing.T) {
	got := pveformat.EncodeSSHKeys([]string{"ssh-ed25519 AAAA+/= a@b.c", " ssh-rsa B~_-. x ", "ssh-ed25519 AAAA+/= a@b.c"})
	want := "ssh-ed25519%20AAAA%2B%2F%3D%20a%40b.c%0Assh-rsa%20B~_-.%20x"
	if got != want {
		t.Errorf("EncodeSSHKeys = %q, want %q", got, want)
	}
	keys, err := pveformat.DecodeSSHKeys(got)
	if err != nil || !slices.Equal(keys, []string{"ssh-ed25519 AAAA+/= a@b.c", "ssh-rsa B~_-. x"}) {
		t.Errorf("decode = %q, %v", keys, err)
	}
	if d := pvewire.LiveSSHKeysDigest(got); d != inventory.SSHKeysDigest(keys) {
		t.Errorf("a raw live value digests to %s, want the inventory's digest", d)
	}
}

func TestParseDriveClassifiesVolumes(t *testing.T) {
	for _, tc := range []struct {
		in                                        string
		storage                                   string
		volume, cdrom, cloudinit, empty, sizeKnow bool
	}{
		{"local-lvm:vm-100-disk-0,size=32G", "local-lvm", true, false, false, false, true},
		{"local:100/vm-100-disk-0.qcow2,size=10G", "local", true, false, false, false, true},
		{"local-lvm:vm-100-cloudinit,media=cdrom", "local-lvm", false, true, true, false, false},
		{"local:100/vm-100-cloudinit.qcow2,media=cdrom,size=4M", "local", false, true, true, false, true},
		{"local-lvm:cloudinit", "local-lvm", false, false, true, false, false},
		{"none,media=cdrom", "", false, true, false, true, false},
		{"local:iso/debian.iso,media=cdrom,size=600M", "local", false, true, false, false, true},
		{"local-lvm:32,iothread=1", "local-lvm", false, false, false, false, false},
		{"cdrom,media=cdrom", "", false, true, false, false, false},
	} {
		d := pvewire.ParseDrive(tc.in)
		_, sized := d.Size()
		got := []bool{d.IsVolume(), d.IsCDROM(), d.IsCloudInit(), d.IsEmpty(), sized}
		want := []bool{tc.volume, tc.cdrom, tc.cloudinit, tc.empty, tc.sizeKnow}
		if !slices.Equal(got, want) || d.Storage() != tc.storage {
			t.Errorf("%q: volume/cdrom/cloudinit/empty/sized = %v, storage %q; want %v, %q", tc.in, got, d.Storage(), want, tc.storage)
		}
	}
}

func TestParseNICReadsEveryModelForm(t *testing.T) {
	for in, want := range map[string]pvewire.NIC{
		"virtio=BC:24:11:00:00:01,bridge=vmbr0,tag=20":       {Model: "virtio", MAC: "BC:24:11:00:00:01", Props: pveformat.Props{{Key: "bridge", Value: "vmbr0"}, {Key: "tag", Value: "20"}}},
		"model=e1000,macaddr=02:00:00:00:00:01,bridge=vmbr1": {Model: "e1000", MAC: "02:00:00:00:00:01", Props: pveformat.Props{{Key: "bridge", Value: "vmbr1"}}},
		"virtio,bridge=vmbr0":                                {Model: "virtio", Props: pveformat.Props{{Key: "bridge", Value: "vmbr0"}}},
	} {
		if diff := cmp.Diff(want, pvewire.ParseNIC(in)); diff != "" {
			t.Errorf("ParseNIC(%q) (-want +got):\n%s", in, diff)
		}
	}
	n := pvewire.ParseNIC("virtio=BC:24:11:00:00:01,tag=20,bridge=vmbr0,firewall=1")
	if got := n.String(); got != "virtio=BC:24:11:00:00:01,bridge=vmbr0,firewall=1,tag=20" {
		t.Errorf("String = %q", got)
	}
}

func TestNormalizePCIAddressAddsTheDefaultDomain(t *testing.T) {
	if a, b := pvewire.NormalizePCIAddress("01:00.0"), pvewire.NormalizePCIAddress("0000:01:00.0"); a != b {
		t.Errorf("%q != %q", a, b)
	}
	if got := pvewire.NormalizePCIAddress("0000:0A:00;0B:00.1"); got != "0000:0a:00;0000:0b:00.1" {
		t.Errorf("got %q", got)
	}
}

func TestAppliesLiveFollowsPVEsHotplugRules(t *testing.T) {
	set := func(k, before, after string) pvewire.Change {
		return pvewire.Change{Key: k, Before: before, HadBefore: before != "", Value: pvewire.Value{Key: k, Value: after}}
	}
	noHotplug := map[string]string{"hotplug": "0"}
	memHotplug := map[string]string{"hotplug": "network,disk,memory"}
	for _, tc := range []struct {
		name string
		t    inventory.GuestType
		c    pvewire.Change
		live map[string]string
		want bool
	}{
		{"name is fast-plug", inventory.QEMU, set("name", "a", "b"), nil, true},
		{"tags are fast-plug", inventory.QEMU, set("tags", "", "proxops"), nil, true},
		{"cloud-init keys are fast-plug", inventory.QEMU, set("ipconfig0", "", "ip=dhcp"), nil, true},
		{"cores wait", inventory.QEMU, set("cores", "2", "4"), nil, false},
		{"memory waits without memory hotplug", inventory.QEMU, set("memory", "2048", "4096"), nil, false},
		{"memory with memory hotplug", inventory.QEMU, set("memory", "2048", "4096"), memHotplug, true},
		{"NIC with the default hotplug", inventory.QEMU, set("net0", "virtio=A,bridge=vmbr0", "virtio=A,bridge=vmbr1"), nil, true},
		{"NIC without network hotplug", inventory.QEMU, set("net0", "virtio=A,bridge=vmbr0", "virtio=A,bridge=vmbr1"), noHotplug, false},
		{"new scsi disk", inventory.QEMU, set("scsi1", "", "local-lvm:8"), nil, true},
		{"new sata disk waits", inventory.QEMU, set("sata0", "", "local-lvm:8"), nil, false},
		{"disk option change waits", inventory.QEMU, set("scsi0", "local-lvm:vm-1-disk-0,size=8G", "local-lvm:vm-1-disk-0,iothread=1,size=8G"), nil, false},
		{"CD medium change", inventory.QEMU, set("ide2", "none,media=cdrom", "local:iso/a.iso,media=cdrom"), nil, true},
		{"new cloud-init drive waits", inventory.QEMU, set("ide2", "", "local-lvm:cloudinit"), nil, false},
		{"hostpci waits", inventory.QEMU, set("hostpci0", "", "0000:01:00.0"), nil, false},
		{"container memory", inventory.LXC, set("memory", "512", "1024"), nil, true},
		{"container cores", inventory.LXC, set("cores", "1", "2"), nil, true},
		{"container NIC", inventory.LXC, set("net0", "name=eth0,bridge=vmbr0", "name=eth0,bridge=vmbr1"), nil, true},
		{"container new mount point", inventory.LXC, set("mp1", "", "local-lvm:1,mp=/x"), nil, true},
		{"container changed mount point waits", inventory.LXC, set("mp1", "local-lvm:vm-1-disk-1,mp=/x", "local-lvm:vm-1-disk-1,mp=/y"), nil, false},
		{"container nameserver waits", inventory.LXC, set("nameserver", "1.1.1.1", "9.9.9.9"), nil, false},
		{"container features wait", inventory.LXC, set("features", "", "nesting=1"), nil, false},
	} {
		if got := pvewire.AppliesLive(tc.t, tc.c, tc.live); got != tc.want {
			t.Errorf("%s: AppliesLive = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestGapsReportUnmodelledKeysAndTokensWithSecretsRedacted(t *testing.T) {
	g := inventory.Guest{Type: inventory.QEMU, Config: []inventory.Entry{
		{Key: "balloon", Value: "0", HasValue: true},
		{Key: "digest", Value: "abc", HasValue: true},
		{Key: "cicustom", Value: "user=local:snippets/u.yaml", HasValue: true},
		{Key: "cipassword", Value: "<present>", HasValue: true},
		{Key: "memory", Value: "2048", HasValue: true},
		{Key: "net0", Value: "virtio=BC:24:11:00:00:01,bridge=vmbr0,mtu=1400", HasValue: true},
		{Key: "scsi0", Value: "local-lvm:vm-1-disk-0,backup=0,size=8G", HasValue: true},
		{Key: "hostpci0", Value: "0000:01:00.0,x-vga=1", HasValue: true},
		{Key: "unused0", Value: "local-lvm:vm-1-disk-9", HasValue: true},
		{Key: "smbios1", Value: "uuid=x", HasValue: true},
	}}
	want := []pvewire.Gap{
		{Key: "balloon", Value: "0"},
		{Key: "cicustom", Value: "user=local:snippets/u.yaml"},
		{Key: "hostpci0", Token: "x-vga", Value: "1"},
		{Key: "net0", Token: "mtu", Value: "1400"},
		{Key: "scsi0", Token: "backup", Value: "0"},
	}
	if diff := cmp.Diff(want, pvewire.Gaps(g)); diff != "" {
		t.Errorf("Gaps (-want +got):\n%s", diff)
	}
	ct := inventory.Guest{Type: inventory.LXC, Config: []inventory.Entry{
		{Key: "lxc", Value: "lxc.apparmor.profile=unconfined", HasValue: true},
		{Key: "features", Value: "nesting=1,mount=nfs", HasValue: true},
		{Key: "password", Value: "secret", HasValue: true},
		{Key: "ostype", Value: "debian", HasValue: true},
	}}
	wantCT := []pvewire.Gap{{Key: "features", Token: "mount", Value: "nfs"}, {Key: "lxc", Value: "lxc.apparmor.profile=unconfined"},
		{Key: "password", Value: pvewire.Redacted}}
	if diff := cmp.Diff(wantCT, pvewire.Gaps(ct)); diff != "" {
		t.Errorf("container Gaps (-want +got):\n%s", diff)
	}
	if !pvewire.IsModelled(inventory.QEMU, "ipconfig3") || pvewire.IsModelled(inventory.QEMU, "args") || !pvewire.IsModelled(inventory.LXC, "mp7") {
		t.Error("IsModelled is wrong")
	}
}

func resolved(t *testing.T, yaml string) *manifest.Resource {
	t.Helper()
	rs, diags := manifest.Parse("x.yaml", []byte(yaml))
	if diags.HasErrors() || len(rs) != 1 {
		t.Fatalf("parse: %v", diags)
	}
	return manifest.Resolve(rs[0])
}

func TestQEMUCreateWritesPVEsWireForms(t *testing.T) {
	r := resolved(t, `apiVersion: proxops/v1alpha1
kind: VM
metadata: {name: web}
spec:
  node: pve1
  vmid: 100
  memory: 1GiB
  cpu: {type: host, cores: 1}
  disks:
    - {storage: local-lvm, size: 512MiB, iothread: true, ssd: true}
  networks:
    - {bridge: vmbr0, vlan: 5, mac: "02:AB:CD:EF:00:01"}
  options: {hidden: false}
`)
	vs, err := pvewire.QEMUCreate(pvewire.Desired{Resource: r})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, v := range vs {
		got[v.Key] = v.Value
	}
	want := map[string]string{"name": "web", "tags": "proxops", "cpu": "host,hidden=0", "cores": "1", "memory": "1024",
		"scsi0": "local-lvm:0.5,iothread=1,ssd=1", "net0": "virtio=02:ab:cd:ef:00:01,bridge=vmbr0,tag=5", "start": "1"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("create values (-want +got):\n%s", diff)
	}
	if vs.Has("vmid") || vs.Has("nestedvirt") || vs.Has("hidden") {
		t.Error("create values carry keys PVE does not take")
	}
}

func TestCloneIdentityDeletesAreDisjointFromWhatTheCloneOwns(t *testing.T) {
	r := resolved(t, `apiVersion: proxops/v1alpha1
kind: VM
metadata: {name: c}
spec:
  node: pve1
  vmid: 101
  clone: tpl
  memory: 1GiB
  cpu: {type: host, cores: 1}
  cloud-init-data:
    ci-user: me
    ipconfigs:
      - {nic: 1, ip: 192.0.2.1/24}
`)
	got := pvewire.CloneIdentityDeletes(pvewire.Desired{Resource: r}, []string{"ipconfig0", "ipconfig1", "ciuser", "memory"})
	want := []string{"cicustom", "cipassword", "ipconfig0", "nameserver", "searchdomain", "sshkeys"}
	if !slices.Equal(got, want) {
		t.Errorf("deletes = %v, want %v", got, want)
	}
	vals, err := pvewire.QEMUClone(pvewire.Desired{Resource: r}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range got {
		if vals.Has(k) {
			t.Errorf("%s is both written and deleted", k)
		}
	}
	if strings.Contains(strings.Join(vals.Keys(), ","), "start") {
		t.Error("a clone's config carries start")
	}
}

// A VM whose config has no cpu key runs PVE's default type (kvm64, cortex-a57 on aarch64): a manifest naming
// that type matches it, any other type is written.
func TestAbsentCPUKeyIsPVEsDefaultType(t *testing.T) {
	vm := func(typ string) pvewire.Desired {
		return pvewire.Desired{Resource: manifest.Resolve(&manifest.Resource{APIVersion: manifest.APIVersion, Kind: manifest.KindVM,
			Metadata: manifest.Metadata{Name: "web"}, Spec: &manifest.VMSpec{Node: "pve1", VMID: 100, CPU: manifest.VMCPU{Type: typ, Cores: 1},
				Memory: "512MiB"}})}
	}
	for _, tc := range []struct {
		typ   string
		live  map[string]string
		write bool
	}{
		{"kvm64", map[string]string{"name": "web"}, false},
		{"host", map[string]string{"name": "web"}, true},
		{"cortex-a57", map[string]string{"name": "web", "arch": "aarch64"}, false},
		{"kvm64", map[string]string{"name": "web", "arch": "aarch64"}, true},
	} {
		d, err := pvewire.QEMU(vm(tc.typ), tc.live, false)
		if err != nil {
			t.Fatal(err)
		}
		wrote := slices.ContainsFunc(d.Changes, func(c pvewire.Change) bool { return c.Key == "cpu" })
		if wrote != tc.write {
			t.Errorf("type %s on %v: cpu written %v, want %v", tc.typ, tc.live, wrote, tc.write)
		}
	}
}

// Settings inside the machine and memory values that the model does not cover are gaps; so is any key or
// token whose name says it holds a secret, with its value redacted.
func TestGapsCoverMachineTokensAndRedactSecretLookingKeys(t *testing.T) {
	g := inventory.Guest{Type: inventory.QEMU, Config: []inventory.Entry{
		{Key: "machine", Value: "q35,viommu=intel", HasValue: true},
		{Key: "memory", Value: "current=2048,max=8192", HasValue: true},
		{Key: "vendor_api_token", Value: "abc", HasValue: true},
		{Key: "my-secret-thing", Value: "def", HasValue: true},
		{Key: "net0", Value: "virtio,bridge=vmbr0,password=ghi", HasValue: true},
	}}
	var got []string
	for _, x := range pvewire.Gaps(g) {
		got = append(got, x.String())
	}
	want := []string{"machine.viommu=intel", "memory.max=8192", "my-secret-thing=<redacted>", "net0.password=<redacted>", "vendor_api_token=<redacted>"}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("gaps (-want +got):\n%s", d)
	}
}

// Values shown whole in gaps keep their secret-looking parts hidden and the rest readable: NAME=value
// parts of words that mention a secret, URL passwords, the argument after a secret-looking flag.
func TestRedactValueHidesSecretLookingParts(t *testing.T) {
	const r = pvewire.Redacted
	tests := []struct{ name, in, want string }{
		{"nothing secret", "-no-hpet -cpu host,kvm=off", "-no-hpet -cpu host,kvm=off"},
		{"env list (NUL)", "DB_PASSWORD=hunter2\x00LANG=C.UTF-8\x00API_TOKEN=abc123", "DB_PASSWORD=" + r + "\x00LANG=C.UTF-8\x00API_TOKEN=" + r},
		{"env list (escaped NUL)", `TZ=UTC\0AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI\0HOME=/root`, `TZ=UTC\0AWS_SECRET_ACCESS_KEY=` + r + `\0HOME=/root`},
		{"names in any case", "db_pwd=x SessionKey=y OAUTH_CLIENT=z credentials_file=/etc/c", "db_pwd=" + r + " SessionKey=" + r + " OAUTH_CLIENT=" + r + " credentials_file=" + r},
		{"raw lxc environment", "lxc.environment=MYSQL_ROOT_PASSWORD=s3cr3t", "lxc.environment=MYSQL_ROOT_PASSWORD=" + r},
		{"raw lxc mount kept", "lxc.mount.entry=/dev/net/tun dev/net/tun none bind,create=file", "lxc.mount.entry=/dev/net/tun dev/net/tun none bind,create=file"},
		{"qemu fw_cfg naming a token", "-fw_cfg name=opt/com.example/token,string=abc123 -no-reboot", "-fw_cfg name=" + r + ",string=" + r + " -no-reboot"},
		{"qemu secret object", "-object secret,id=sec0,data=letmein", "-object secret,id=" + r + ",data=" + r},
		{"systemd credential over smbios", "-smbios type=11,value=io.systemd.credential:password=xyz", "-smbios type=" + r + ",value=io.systemd.credential:password=" + r},
		{"flag then value", "--auth-token abc123 --verbose", "--auth-token " + r + " --verbose"},
		{"url password", "-drive file=https://deploy:pa55@images.example/disk.qcow2,if=none", "-drive file=https://deploy:" + r + "@images.example/disk.qcow2,if=none"},
		{"url without password", "https://images.example/disk.qcow2", "https://images.example/disk.qcow2"},
		{"secret word without assignment", "local:snippets/auth-hook.sh", "local:snippets/auth-hook.sh"},
		{"passthrough and keyboard are not secrets", "mapping=gpu-passthrough -device usb-kbd,id=keyboard0 -global ide.bypass=on",
			"mapping=gpu-passthrough -device usb-kbd,id=keyboard0 -global ide.bypass=on"},
		{"a secret beside passthrough", "passthrough_password=x", "passthrough_password=" + r},
		{"already redacted", r, r},
		{"separators kept", "  a=1\t\tb=2 \n", "  a=1\t\tb=2 \n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := pvewire.RedactValue(tc.in)
			if got != tc.want {
				t.Fatalf("RedactValue(%q)\n got %q\nwant %q", tc.in, got, tc.want)
			}
			if again := pvewire.RedactValue(got); again != got {
				t.Fatalf("redacting twice changed %q to %q", got, again)
			}
		})
	}
}

// Gaps redact by value too: the env of a container, its raw lxc keys and a VM's args keep their
// harmless parts and lose their secrets, the same way on every call.
func TestGapsRedactSecretLookingValues(t *testing.T) {
	ct := inventory.Guest{Type: inventory.LXC, Config: []inventory.Entry{
		{Key: "env", Value: "DB_PASSWORD=hunter2\x00LANG=C", HasValue: true},
		{Key: "lxc", Value: "lxc.environment=API_KEY=k-123", HasValue: true},
		{Key: "hookscript", Value: "local:snippets/hook.pl", HasValue: true},
	}}
	vm := inventory.Guest{Type: inventory.QEMU, Config: []inventory.Entry{
		{Key: "args", Value: "-fw_cfg name=opt/vault/token,string=s.abcdef -no-hpet", HasValue: true},
	}}
	var got []string
	for _, g := range []inventory.Guest{ct, vm} {
		first, second := pvewire.Gaps(g), pvewire.Gaps(g)
		if d := cmp.Diff(first, second); d != "" {
			t.Fatalf("gaps differ between calls:\n%s", d)
		}
		for _, x := range first {
			got = append(got, x.String())
		}
	}
	want := []string{"env=DB_PASSWORD=<redacted>\x00LANG=C", "hookscript=local:snippets/hook.pl",
		"lxc=lxc.environment=API_KEY=<redacted>", "args=-fw_cfg name=<redacted>,string=<redacted> -no-hpet"}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("gaps (-want +got):\n%s", d)
	}
	for _, s := range []string{"hunter2", "k-123", "s.abcdef"} {
		if strings.Contains(strings.Join(got, " "), s) {
			t.Errorf("a gap carries %q", s)
		}
	}
}
