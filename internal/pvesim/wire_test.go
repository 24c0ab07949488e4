package pvesim_test

import (
	"net/url"
	"strings"
	"testing"
)

// Each production bug of the predecessor that was a wrong request is refused the way PVE refuses it.
func TestSimulatorRefusesKnownBadRequests(t *testing.T) {
	c := defaultCluster(t)
	c.mustTask("POST", "/nodes/pve1/qemu", form("vmid", "100", "scsi0", "local-lvm:1", "net0", "virtio,bridge=vmbr0"))
	c.mustTask("POST", "/nodes/pve1/lxc", form("vmid", "200", "ostemplate", "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst",
		"rootfs", "local-lvm:2", "net0", "name=eth0,bridge=vmbr0"))
	tests := []struct {
		name     string
		method   string
		path     string
		form     []string
		auth     string
		status   int
		errKey   string // expected key in errors
		contains string // expected substring of errors[errKey] or message
	}{
		{"boolean as true", "POST", "/nodes/pve1/qemu", []string{"vmid", "101", "start", "true"}, "", 400, "start", "type check ('boolean') failed - got 'true'"},
		{"vlan on a qemu nic", "POST", "/nodes/pve1/qemu/100/config", []string{"net1", "virtio,bridge=vmbr0,vlan=10"}, "", 400, "net1", "invalid key in comma-separated list property: vlan"},
		{"virtio with empty mac", "POST", "/nodes/pve1/qemu/100/config", []string{"net1", "virtio=,bridge=vmbr0"}, "", 400, "net1", "missing key in comma-separated list property"},
		{"iothread as sibling parameter", "POST", "/nodes/pve1/qemu/100/config", []string{"scsi0.iothread", "1"}, "", 400, "scsi0.iothread", "property is not defined in schema"},
		{"unencoded sshkeys", "POST", "/nodes/pve1/qemu/100/config", []string{"sshkeys", "ssh-ed25519 AAAAC3Nza user@host"}, "", 400, "sshkeys", "invalid urlencoded string"},
		{"sshkeys encoded with + for space", "POST", "/nodes/pve1/qemu/100/config", []string{"sshkeys", url.QueryEscape("ssh-ed25519 AAAAC3Nza user@host")}, "", 400, "sshkeys", "invalid urlencoded string: ssh-ed25519+AAAAC3Nza+user%40host"},
		{"set and delete the same key", "POST", "/nodes/pve1/qemu/100/config", []string{"tags", "a", "delete", "tags"}, "", 400, "delete", "you can't use '-tags' and -delete tags' at the same time"},
		{"delete an unknown key", "POST", "/nodes/pve1/qemu/100/config", []string{"delete", "bogus"}, "", 400, "delete", "unknown option 'bogus'"},
		{"ssd on virtio", "POST", "/nodes/pve1/qemu/100/config", []string{"virtio1", "local-lvm:1,ssd=1"}, "", 400, "virtio1", "invalid key in comma-separated list property: ssd"},
		{"import-from with a size", "POST", "/nodes/pve1/qemu/100/config", []string{"scsi1", "local-lvm:8,import-from=local:import/noble.qcow2"}, "", 400, "scsi1", "'import-from' requires special syntax - use <storage ID>:0,import-from=<source>"},
		{"iso without media=cdrom", "POST", "/nodes/pve1/qemu/100/config", []string{"ide2", "local:iso/debian-12.iso"}, "", 400, "ide2", "explicit 'media=cdrom' is required for iso images"},
		{"secure-boot token on efidisk", "POST", "/nodes/pve1/qemu/100/config", []string{"efidisk0", "local-lvm:1,secure-boot=1"}, "", 400, "efidisk0", "invalid key in comma-separated list property: secure-boot"},
		{"nesting as a top-level key", "PUT", "/nodes/pve1/lxc/200/config", []string{"nesting", "1"}, "", 400, "nesting", "property is not defined in schema and the schema does not allow additional properties"},
		{"lxc config via POST", "POST", "/nodes/pve1/lxc/200/config", []string{"memory", "1024"}, "", 501, "", "Method 'POST /nodes/pve1/lxc/200/config' not implemented"},
		{"untemplate", "POST", "/nodes/pve1/qemu/100/untemplate", nil, "", 501, "", "not implemented"},
		{"download", "POST", "/nodes/pve1/storage/local/download", []string{"url", "https://x/y.iso"}, "", 501, "", "not implemented"},
		{"security endpoint", "POST", "/nodes/pve1/qemu/100/security", nil, "", 501, "", "not implemented"},
		{"keyctl with a token", "PUT", "/nodes/pve1/lxc/200/config", []string{"features", "nesting=1,keyctl=1"}, "", 403, "", "Permission check failed (changing feature flags (except nesting) is only allowed for root@pam)"},
		{"bind mount with a token", "PUT", "/nodes/pve1/lxc/200/config", []string{"mp0", "/srv/data,mp=/data"}, "", 403, "", "mount point type bind is only allowed for root@pam"},
		{"unprivileged changed by PUT", "PUT", "/nodes/pve1/lxc/200/config", []string{"unprivileged", "0"}, "", 500, "", "unable to modify read-only option: 'unprivileged'"},
		{"args with a token", "POST", "/nodes/pve1/qemu/100/config", []string{"args", "-no-reboot"}, "", 500, "", "only root can set 'args' config"},
		{"skiplock with a token", "POST", "/nodes/pve1/qemu/100/config", []string{"name", "x", "skiplock", "1"}, "", 400, "skiplock", "Only root may use this option."},
		{"serial device with a token", "POST", "/nodes/pve1/qemu/100/config", []string{"serial0", "/dev/ttyS0"}, "", 500, "", "only root can set 'serial0' config for real devices"},
		{"name with an underscore", "POST", "/nodes/pve1/qemu/100/config", []string{"name", "web_01"}, "", 400, "name", "value does not look like a valid DNS name"},
		{"qemu disk as a bare number", "POST", "/nodes/pve1/qemu/100/config", []string{"scsi1", "8"}, "", 400, "scsi1", "unable to parse volume ID '8'"},
		{"invalid tag", "POST", "/nodes/pve1/qemu/100/config", []string{"tags", "env=dev"}, "", 400, "tags", "invalid characters in tag"},
		{"vmid below 100", "POST", "/nodes/pve1/qemu", []string{"vmid", "99"}, "", 400, "vmid", "invalid format - value does not look like a valid VM ID"},
		{"memory not an integer", "POST", "/nodes/pve1/qemu/100/config", []string{"memory", "abc"}, "", 400, "memory", "type check ('integer') failed - got 'abc'"},
		{"pattern mismatch", "POST", "/nodes/pve1/qemu/100/config", []string{"startdate", "yesterday"}, "", 400, "startdate", "value does not match the regex pattern"},
		{"integer below its minimum", "POST", "/nodes/pve1/qemu/100/config", []string{"cores", "0"}, "", 400, "cores", "value must have a minimum value of 1"},
		{"number above its maximum", "POST", "/nodes/pve1/qemu/100/config", []string{"cpulimit", "200"}, "", 400, "cpulimit", "value must have a maximum value of 128"},
		{"bad storage id", "GET", "/nodes/pve1/storage/a_/content", nil, "", 400, "storage", "storage ID 'a_' contains illegal characters"},
		{"bad configuration id in delete", "POST", "/nodes/pve1/qemu/100/config", []string{"delete", "1bad"}, "", 400, "delete", "invalid configuration ID '1bad'"},
		{"boolean in a property string", "POST", "/nodes/pve1/qemu/100/config", []string{"net1", "virtio,bridge=vmbr0,firewall=maybe"}, "", 400, "net1", "type check ('boolean') failed - got 'maybe'"},
		{"bad enum", "POST", "/nodes/pve1/qemu/100/config", []string{"ostype", "dos"}, "", 400, "ostype", "value 'dos' does not have a value in the enumeration"},
		{"duplicate vmid across types", "POST", "/nodes/pve2/qemu", []string{"vmid", "200"}, "", 500, "", "unable to create VM 200 - CT 200 already exists on node 'pve1'"},
		{"lxc create with a used vmid", "POST", "/nodes/pve2/lxc", []string{"vmid", "100", "ostemplate", "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst"}, "", 500, "", "VM 100 already exists on node 'pve1'"},
		{"digest mismatch qemu", "PUT", "/nodes/pve1/qemu/100/config", []string{"name", "x", "digest", "0000000000000000000000000000000000000000"}, "", 500, "", "checksum mismatch (file change by other user?)"},
		{"digest mismatch lxc", "PUT", "/nodes/pve1/lxc/200/config", []string{"hostname", "x", "digest", "0000000000000000000000000000000000000000"}, "", 500, "", "detected modified configuration - file changed by other user? Try again."},
		{"guest on another node", "GET", "/nodes/pve2/qemu/100/config", nil, "", 500, "", "Configuration file 'nodes/pve2/qemu-server/100.conf' does not exist"},
		{"no options", "PUT", "/nodes/pve1/qemu/100/config", nil, "", 500, "", "no options specified"},
		{"lxc stop when stopped", "POST", "/nodes/pve1/lxc/200/status/stop", nil, "", 500, "", "CT 200 not running"},
		{"nextid taken", "GET", "/cluster/nextid", []string{"vmid", "100"}, "", 400, "vmid", "VM 100 already exists"},
		{"bad token", "GET", "/nodes", nil, "PVEAPIToken=root@pam!proxops=wrong", 401, "", "Authentication failed!"},
		{"no credentials", "GET", "/nodes", nil, "-", 401, "", "No ticket"},
		{"nextid with a non-integer", "GET", "/cluster/nextid", []string{"vmid", "abc"}, "", 400, "vmid", "type check ('integer') failed - got 'abc'"},
		{"path and body disagree", "POST", "/nodes/pve1/qemu/100/config", []string{"vmid", "101", "name", "x"}, "", 400, "vmid", "duplicate parameter (already defined in URI) with conflicting values!"},
		{"unknown parameter", "POST", "/nodes/pve1/qemu/100/config", []string{"frobnicate", "1"}, "", 400, "frobnicate", "property is not defined in schema and the schema does not allow additional properties"},
		{"bad bridge", "POST", "/nodes/pve1/qemu/100/config", []string{"net1", "virtio,bridge=vmbr9"}, "", 500, "", "bridge 'vmbr9' does not exist"},
		{"migrate to the local node", "POST", "/nodes/pve1/qemu/100/migrate", []string{"target", "pve1"}, "", 400, "target", "target is local node."},
		{"migrate to an unknown node", "POST", "/nodes/pve1/qemu/100/migrate", []string{"target", "pve7"}, "", 500, "", "no such cluster node 'pve7'"},
		{"migrate without a target", "POST", "/nodes/pve1/qemu/100/migrate", nil, "", 400, "target", "property is missing and it is not optional"},
		{"migrate online as a word", "POST", "/nodes/pve1/qemu/100/migrate", []string{"target", "pve2", "online", "yes-please"}, "", 400, "online", "type check ('boolean') failed"},
		{"migrate a guest from the wrong node", "POST", "/nodes/pve2/qemu/100/migrate", []string{"target", "pve3"}, "", 500, "", "Configuration file 'nodes/pve2/qemu-server/100.conf' does not exist"},
		{"migrate with a bad storage map", "POST", "/nodes/pve1/qemu/100/migrate", []string{"target", "pve2", "targetstorage", "local-lvm:nope"}, "", 500, "", "storage 'nope' does not exist"},
		{"container migrate with a vm option", "POST", "/nodes/pve1/lxc/200/migrate", []string{"target", "pve2", "with-local-disks", "1"}, "", 400, "with-local-disks", "property is not defined in schema"},
		{"container precondition from the wrong node", "GET", "/nodes/pve3/lxc/200/migrate", nil, "", 500, "", "Configuration file 'nodes/pve3/lxc/200.conf' does not exist"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			auth := ciToken
			if tc.auth == "-" {
				auth = ""
			} else if tc.auth != "" {
				auth = tc.auth
			}
			var f = form(tc.form...)
			if tc.form == nil {
				f = nil
			}
			r := c.do(tc.method, tc.path, f, auth)
			if r.Status != tc.status {
				t.Fatalf("status %d (%s %v), want %d", r.Status, r.Message, r.Errors, tc.status)
			}
			got := r.Message
			if tc.errKey != "" {
				got = r.Errors[tc.errKey]
			}
			if !strings.Contains(got, tc.contains) {
				t.Fatalf("got %q (errors %v), want it to contain %q", got, r.Errors, tc.contains)
			}
			if r.Reason != strings.SplitN(r.Message, "\n", 2)[0] {
				t.Errorf("reason phrase %q, want the message's first line %q", r.Reason, r.Message)
			}
		})
	}
}

// A disk size sent in bytes is read as GiB and the allocation fails in the task, as on LVM-thin.
func TestDiskSizeInBytesFailsTheCreateTask(t *testing.T) {
	c := defaultCluster(t)
	r := c.do("POST", "/nodes/pve1/qemu", form("vmid", "100", "scsi0", "local-lvm:8589934592"))
	if r.Status != 200 {
		t.Fatalf("create: %d %s", r.Status, r.Message)
	}
	st := c.waitTask(r.str(t))
	if !strings.Contains(st, "unable to create VM 100 - lvcreate") || !strings.Contains(st, "Volume too large (8.00 EiB)") {
		t.Fatalf("exitstatus %q", st)
	}
	if c.sim.Exists(100) {
		t.Fatal("a failed create must remove the config")
	}
}

// QEMU start on a running VM fails in the task; stop on a stopped VM succeeds; LXC errors are synchronous.
func TestPowerErrorsFollowPVE(t *testing.T) {
	c := defaultCluster(t)
	c.mustTask("POST", "/nodes/pve1/qemu", form("vmid", "100", "start", "1"))
	if !c.sim.Running(100) {
		t.Fatal("start=1 must start the VM")
	}
	r := c.do("POST", "/nodes/pve1/qemu/100/status/start", nil)
	if r.Status != 200 {
		t.Fatalf("start: %d", r.Status)
	}
	if st := c.waitTask(r.str(t)); st != "VM 100 already running" {
		t.Fatalf("exitstatus %q", st)
	}
	c.mustTask("POST", "/nodes/pve1/qemu/100/status/stop", nil)
	c.mustTask("POST", "/nodes/pve1/qemu/100/status/shutdown", nil)
	r = c.do("DELETE", "/nodes/pve1/qemu/100", nil)
	if r.Status != 200 {
		t.Fatalf("destroy: %d %s", r.Status, r.Message)
	}
	c.waitTask(r.str(t))
	if c.sim.Exists(100) {
		t.Fatal("guest still exists after destroy")
	}
}
