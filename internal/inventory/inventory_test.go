package inventory_test

import (
	"testing"

	"github.com/proxops/proxops/internal/inventory"
)

func TestSSHKeysDigestIgnoresOrderDuplicatesAndSpacing(t *testing.T) {
	a := inventory.SSHKeysDigest([]string{"ssh-ed25519 AAAA one@host", "ssh-rsa BBBB two@host"})
	b := inventory.SSHKeysDigest([]string{" ssh-rsa  BBBB two@host", "", "ssh-ed25519 AAAA one@host", "ssh-ed25519 AAAA one@host"})
	if a != b {
		t.Fatalf("digests differ: %s vs %s", a, b)
	}
	if c := inventory.SSHKeysDigest([]string{"ssh-ed25519 AAAA one@host"}); c == a {
		t.Fatal("a different key set has the same digest")
	}
}

func TestDecodeSSHKeysReadsPVEEncoding(t *testing.T) {
	keys, err := inventory.DecodeSSHKeys("ssh-ed25519%20AAAAC3Nz%2B%3D%20a%40b%0Assh-rsa%20BBBB%20c%40d%0A")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"ssh-ed25519 AAAAC3Nz+= a@b", "ssh-rsa BBBB c@d"}
	if len(keys) != len(want) || keys[0] != want[0] || keys[1] != want[1] {
		t.Fatalf("DecodeSSHKeys = %q, want %q", keys, want)
	}
	if _, err := inventory.DecodeSSHKeys("abc%2"); err == nil {
		t.Fatal("a truncated escape was accepted")
	}
}

func TestFingerprintChangesWhenPVERegeneratesIdentity(t *testing.T) {
	vm := inventory.Guest{Type: inventory.QEMU, Config: []inventory.Entry{
		{Key: "smbios1", Value: "uuid=7B0F3E1A-0000-4000-8000-000000000001", HasValue: true},
	}}
	if got := inventory.Fingerprint(vm); got != "uuid=7b0f3e1a-0000-4000-8000-000000000001" {
		t.Fatalf("qemu fingerprint = %q", got)
	}
	ct := inventory.Guest{Type: inventory.LXC, Config: []inventory.Entry{
		{Key: "net1", Value: "name=eth1,bridge=vmbr0,hwaddr=BC:24:11:00:00:02,type=veth", HasValue: true},
		{Key: "net0", Value: "name=eth0,bridge=vmbr0,hwaddr=BC:24:11:00:00:01,type=veth", HasValue: true},
	}}
	if got := inventory.Fingerprint(ct); got != "hwaddr=bc:24:11:00:00:01;bc:24:11:00:00:02" {
		t.Fatalf("lxc fingerprint = %q", got)
	}
	if got := inventory.Fingerprint(inventory.Guest{Type: inventory.QEMU}); got != "" {
		t.Fatalf("a guest without smbios1 has fingerprint %q", got)
	}
}

func TestClusterFindsGuestOnAnyNode(t *testing.T) {
	c := inventory.Cluster{Name: "lab", Nodes: []inventory.Node{
		{Node: "pve1", Guests: []inventory.Guest{{VMID: 100, Node: "pve1"}, {VMID: 102, Node: "pve1"}}},
		{Node: "pve2", Guests: []inventory.Guest{{VMID: 101, Node: "pve2"}}},
	}}
	if g, ok := c.Guest(101); !ok || g.Node != "pve2" {
		t.Fatalf("Guest(101) = %+v, %v", g, ok)
	}
	if _, ok := c.Guest(103); ok {
		t.Fatal("Guest(103) found a guest that does not exist")
	}
	if got := len(c.Guests()); got != 3 {
		t.Fatalf("Guests() has %d entries, want 3", got)
	}
}
