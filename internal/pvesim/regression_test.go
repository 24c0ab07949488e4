package pvesim_test

import (
	"strings"
	"testing"

	"github.com/proxops/proxops/internal/pvesim"
)

// The rest of the predecessor's production bug table (pve-facts B.2), one test each.

func expectErr(t *testing.T, r reply, status int, key, want string) {
	t.Helper()
	got := r.Message
	if key != "" {
		got = r.Errors[key]
	}
	if r.Status != status || !strings.Contains(got, want) {
		t.Fatalf("got %d %q %v, want %d with %q", r.Status, r.Message, r.Errors, status, want)
	}
}

// B.2 item 1 variant: import-from only with size 0.
func TestImportFromWithASizeIsRefused(t *testing.T) {
	c := defaultCluster(t)
	r := c.do("POST", "/nodes/pve1/qemu", form("vmid", "100", "scsi0", "local-lvm:8,import-from=local:import/noble.qcow2"))
	expectErr(t, r, 400, "scsi0", "'import-from' requires special syntax - use <storage ID>:0,import-from=<source>")
	r = c.do("POST", "/nodes/pve1/qemu", form("vmid", "100", "scsi0", "local-lvm:0,import-from=local:iso/debian-12.iso"))
	expectErr(t, r, 400, "scsi0", "local:iso/debian-12.iso has wrong type 'iso' - needs to be 'images' or 'import'")
	c.mustTask("POST", "/nodes/pve1/qemu", form("vmid", "100", "scsi0", "local-lvm:0,import-from=local:import/noble.qcow2"))
	if got := c.config("pve1", "qemu", 100)["scsi0"]; got != "local-lvm:vm-100-disk-0,size=3G" {
		t.Fatalf("imported disk %v: the source's size becomes the disk's", got)
	}
	if c.content("pve1", "local", nil)["local:import/noble.qcow2"] == nil {
		t.Fatal("the import source must be kept")
	}
}

// B.2 item 16: clone rejects start.
func TestCloneWithStartIsRefused(t *testing.T) {
	c := defaultCluster(t)
	c.mustTask("POST", "/nodes/pve1/qemu", form("vmid", "100"))
	expectErr(t, c.do("POST", "/nodes/pve1/qemu/100/clone", form("newid", "101", "start", "1")), 400, "start",
		"property is not defined in schema and the schema does not allow additional properties")
}

// B.2 item 16: a missing source is a synchronous 500 with no UPID.
func TestCloneOfAMissingSourceIsSynchronous(t *testing.T) {
	c := defaultCluster(t)
	r := c.do("POST", "/nodes/pve1/qemu/100/clone", form("newid", "101"))
	expectErr(t, r, 500, "", "Configuration file 'nodes/pve1/qemu-server/100.conf' does not exist")
	if string(r.Data) != "null" {
		t.Fatalf("data %s", r.Data)
	}
}

// B.2 item 14: re-sending a cloud-init drive over the live one fails the task (the volume exists).
func TestResendingTheCloudInitDriveFails(t *testing.T) {
	c := defaultCluster(t)
	c.mustTask("POST", "/nodes/pve1/qemu", form("vmid", "100", "ide2", "local-lvm:cloudinit", "ciuser", "ops"))
	c.mustTask("POST", "/nodes/pve1/qemu/100/clone", form("newid", "101"))
	_, st := c.taskOf("POST", "/nodes/pve1/qemu/101/config", form("ide2", "local-lvm:cloudinit"))
	if st != `lvcreate 'pve/vm-101-cloudinit' error:   Logical Volume "vm-101-cloudinit" already exists in volume group "pve"` {
		t.Fatalf("exitstatus %q", st)
	}
	expectErr(t, c.do("POST", "/nodes/pve1/qemu/101/config", form("ide0", "local-lvm:cloudinit")), 500, "",
		"ide0 - cloud-init drive is already attached at 'ide2'")
	// Clearing the inherited identity with delete= works, and one request may not set and delete a key.
	c.mustTask("POST", "/nodes/pve1/qemu/101/config", form("delete", "ciuser"))
	expectErr(t, c.do("POST", "/nodes/pve1/qemu/101/config", form("ciuser", "x", "delete", "ciuser")), 400, "delete",
		"you can't use '-ciuser' and -delete ciuser' at the same time")
}

// B.2 item 22: ssd is not a virtio option.
func TestSSDOnVirtioIsRefused(t *testing.T) {
	c := defaultCluster(t)
	expectErr(t, c.do("POST", "/nodes/pve1/qemu", form("vmid", "100", "virtio0", "local-lvm:1,ssd=1")), 400, "virtio0",
		"invalid key in comma-separated list property: ssd")
}

// Deleting an unknown key is a 400; deleting a known key that is not set only warns.
func TestDeletingAnUnknownKeyIsRefused(t *testing.T) {
	c := defaultCluster(t)
	c.mustTask("POST", "/nodes/pve1/qemu", form("vmid", "100"))
	expectErr(t, c.do("POST", "/nodes/pve1/qemu/100/config", form("delete", "bogus")), 400, "delete", "unknown option 'bogus'")
	upid, st := c.taskOf("POST", "/nodes/pve1/qemu/100/config", form("delete", "tags"))
	if st != "OK" {
		t.Fatalf("deleting an unset key: %s", st)
	}
	if log := c.do("GET", "/nodes/pve1/tasks/"+upid+"/log", nil); !strings.Contains(string(log.Data), "cannot delete 'tags' - not set in current configuration!") {
		t.Fatalf("log %s", log.Data)
	}
}

// B.2 item 10: there is no /download endpoint; download-url checks the extension against the content.
func TestDownloadEndpointIsNotImplemented(t *testing.T) {
	c := defaultCluster(t)
	expectErr(t, c.do("POST", "/nodes/pve1/storage/local/download", form("url", "https://example.com/x.iso")), 501, "",
		"Method 'POST /nodes/pve1/storage/local/download' not implemented")
	expectErr(t, c.do("POST", "/nodes/pve1/storage/local/download-url", form("url", "https://example.com/x.qcow2",
		"content", "iso", "filename", "x.qcow2")), 400, "filename", "wrong file extension")
}

// B.2 item 12: a create-form value over a live disk allocates a new volume; the old one becomes unusedN.
func TestCreateFormOverALiveDiskKeepsTheOldVolume(t *testing.T) {
	c := defaultCluster(t)
	c.mustTask("POST", "/nodes/pve1/qemu", form("vmid", "100", "scsi0", "local-lvm:2"))
	c.mustTask("POST", "/nodes/pve1/qemu/100/config", form("scsi0", "local-lvm:4"))
	cfg := c.config("pve1", "qemu", 100)
	if cfg["scsi0"] != "local-lvm:vm-100-disk-1,size=4G" || cfg["unused0"] != "local-lvm:vm-100-disk-0" {
		t.Fatalf("config %v", cfg)
	}
}

// B.2 item 13: scsiN=none detaches the disk; the volume stays; force=1 on a delete destroys it.
func TestDetachingKeepsTheVolume(t *testing.T) {
	c := defaultCluster(t)
	c.mustTask("POST", "/nodes/pve1/qemu", form("vmid", "100", "scsi0", "local-lvm:1", "scsi1", "local-lvm:1"))
	c.mustTask("POST", "/nodes/pve1/qemu/100/config", form("scsi0", "none,media=cdrom"))
	if cfg := c.config("pve1", "qemu", 100); cfg["unused0"] != "local-lvm:vm-100-disk-0" {
		t.Fatalf("config %v", cfg)
	}
	c.mustTask("POST", "/nodes/pve1/qemu/100/config", form("delete", "scsi1", "force", "1"))
	vols := c.content("pve1", "local-lvm", nil)
	if vols["local-lvm:vm-100-disk-0"] == nil || vols["local-lvm:vm-100-disk-1"] != nil {
		t.Fatalf("volumes %v", vols)
	}
	if _, ok := c.config("pve1", "qemu", 100)["unused1"]; ok {
		t.Fatal("a forced delete must not leave unusedN")
	}
}

// B.2 item 21: cipassword reads back as a mask, and writing the mask back replaces the password.
func TestCipasswordMaskOverwritesWhenWrittenBack(t *testing.T) {
	c := defaultCluster(t)
	c.mustTask("POST", "/nodes/pve1/qemu", form("vmid", "100", "cipassword", "s3cret"))
	cfg := c.config("pve1", "qemu", 100)
	if cfg["cipassword"] != "**********" {
		t.Fatalf("cipassword reads %v", cfg["cipassword"])
	}
	before, _ := c.sim.Config(100)
	c.mustTask("POST", "/nodes/pve1/qemu/100/config", form("cipassword", cfg["cipassword"].(string)))
	after, _ := c.sim.Config(100)
	if !strings.HasPrefix(after["cipassword"], "$6$") || after["cipassword"] == before["cipassword"] {
		t.Fatalf("stored hash %q → %q: writing the mask back must replace the password", before["cipassword"], after["cipassword"])
	}
	for _, e := range c.sim.Requests() {
		if v, ok := e.Params["cipassword"]; ok && v != "**********" {
			t.Fatalf("request log leaks cipassword: %v", e.Params)
		}
	}
}

// B.2 item 26: a cloud-init drive on a storage without images content is created, and the VM fails at
// start.
func TestCloudInitOnStorageWithoutImagesFailsAtStart(t *testing.T) {
	spec := pvesim.DefaultSpec()
	spec.Storages = append(spec.Storages, pvesim.StorageSpec{ID: "isos", Type: "dir", Content: []string{"iso"}})
	c := newCluster(t, spec)
	c.mustTask("POST", "/nodes/pve1/qemu", form("vmid", "100", "ide2", "isos:cloudinit"))
	if got := c.config("pve1", "qemu", 100)["ide2"]; got != "isos:100/vm-100-cloudinit.qcow2,media=cdrom" {
		t.Fatalf("ide2 %v", got)
	}
	if _, st := c.taskOf("POST", "/nodes/pve1/qemu/100/status/start", nil); st != "storage 'isos' does not support content-type 'images'" {
		t.Fatalf("start: %q", st)
	}
}

// A VM without disk, cdrom or NIC gets no boot key (print_bootorder gives "" and "order=" alone is not
// a valid pve-qm-boot); a clone of it has none either. With devices the default order is disk, cdrom, NIC.
func TestCreateWithoutBootDevicesLeavesBootUnset(t *testing.T) {
	c := defaultCluster(t)
	c.mustTask("POST", "/nodes/pve1/qemu", form("vmid", "100", "name", "bare", "cores", "2"))
	if b, ok := c.config("pve1", "qemu", 100)["boot"]; ok {
		t.Fatalf("a VM without boot devices has boot %q", b)
	}
	c.mustTask("POST", "/nodes/pve1/qemu/100/clone", form("newid", "101"))
	if b, ok := c.config("pve1", "qemu", 101)["boot"]; ok {
		t.Fatalf("its clone has boot %q", b)
	}
	r := c.do("PUT", "/nodes/pve1/qemu/100/config", form("boot", "order="))
	if r.Status != 400 || r.Errors["boot"] == "" {
		t.Fatalf("an empty order must stay invalid: %d %s %v", r.Status, r.Message, r.Errors)
	}
	c.mustTask("POST", "/nodes/pve1/qemu", form("vmid", "102", "net0", "virtio,bridge=vmbr0",
		"ide2", "local:iso/debian-12.iso,media=cdrom", "scsi0", "local-lvm:1"))
	if b := c.config("pve1", "qemu", 102)["boot"]; b != "order=scsi0;ide2;net0" {
		t.Fatalf("default boot order %q", b)
	}
}
