"""Drives the simulator with the unmodified proxmoxer client (Debian python3-proxmoxer).

Usage: proxmoxer_client.py HOST PORT TOKEN_USER TOKEN_NAME TOKEN_SECRET ROOT_PASSWORD FILES_URL ISO_SHA256 QCOW2_SHA256
FILES_URL serves debian.iso and noble.qcow2 on loopback.
Exits non-zero with a message on the first failed expectation.
"""
import sys
import time

from proxmoxer import ProxmoxAPI
from proxmoxer.core import ResourceException


def wait(api, node, upid):
    for _ in range(1000):
        st = api.nodes(node).tasks(upid).status.get()
        if st["status"] == "stopped":
            return st["exitstatus"]
        time.sleep(0.01)
    raise SystemExit("task %s did not finish" % upid)


def expect(cond, msg):
    if not cond:
        raise SystemExit("FAIL: " + msg)


def main():
    host, port, tuser, tname, tsecret, rootpw, files, iso_sha, qcow_sha = sys.argv[1:10]
    api = ProxmoxAPI(host, port=int(port), user=tuser, token_name=tname, token_value=tsecret,
                     verify_ssl=False, service="PVE")
    nodes = sorted(n["node"] for n in api.nodes.get())
    expect(nodes == ["pve1", "pve2", "pve3"], "nodes %r" % nodes)
    storages = sorted(s["storage"] for s in api.nodes("pve1").storage.get())
    expect(storages == ["local", "local-lvm"], "storages %r" % storages)
    iso = [s["storage"] for s in api.nodes("pve1").storage.get(content="iso")]
    expect(iso == ["local"], "iso storages %r" % iso)

    vmid = int(api.cluster.nextid.get())
    upid = api.nodes("pve1").qemu.post(vmid=vmid, name="py-vm", memory=1024, cores=2,
                                       scsi0="local-lvm:4", net0="virtio,bridge=vmbr0", tags="Web,db")
    expect(wait(api, "pve1", upid) == "OK", "qemu create")
    conf = api.nodes("pve1").qemu(vmid).config.get()
    expect(conf["tags"] == "db;web", "tags %r" % conf["tags"])
    expect(conf["scsi0"] == "local-lvm:vm-%d-disk-0,size=4G" % vmid, "scsi0 %r" % conf["scsi0"])
    expect(conf["net0"].startswith("virtio=BC:24:11:"), "net0 %r" % conf["net0"])

    api.nodes("pve1").qemu(vmid).config.put(cores=4, digest=conf["digest"])
    conf2 = api.nodes("pve1").qemu(vmid).config.get()
    expect(conf2["cores"] == 4, "cores %r" % conf2["cores"])
    try:
        api.nodes("pve1").qemu(vmid).config.put(cores=8, digest=conf["digest"])
        raise SystemExit("FAIL: stale digest accepted")
    except ResourceException as e:
        expect(e.status_code == 500 and "checksum mismatch" in str(e), "stale digest error %s" % e)

    expect(wait(api, "pve1", api.nodes("pve1").qemu(vmid).status.start.post()) == "OK", "start")
    expect(api.nodes("pve1").qemu(vmid).status.current.get()["status"] == "running", "running")
    expect(wait(api, "pve1", api.nodes("pve1").qemu(vmid).status.stop.post()) == "OK", "stop")

    ctid = vmid + 1
    upid = api.nodes("pve2").lxc.post(vmid=ctid, hostname="py-ct", rootfs="local-lvm:2",
                                      ostemplate="local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst",
                                      net0="name=eth0,bridge=vmbr0,ip=dhcp", features="nesting=1")
    expect(wait(api, "pve2", upid) == "OK", "lxc create")
    ct = api.nodes("pve2").lxc(ctid).config.get()
    expect(ct["unprivileged"] == 1 and "type=veth" in ct["net0"] and "hwaddr=" in ct["net0"], "ct %r" % ct)
    api.nodes("pve2").lxc(ctid).config.put(memory=1024, digest=ct["digest"])
    expect(api.nodes("pve2").lxc(ctid).config.get()["memory"] == 1024, "ct memory")
    expect(wait(api, "pve2", api.nodes("pve2").lxc(ctid).status.start.post()) == "OK", "ct start")
    expect(wait(api, "pve2", api.nodes("pve2").lxc(ctid).status.stop.post()) == "OK", "ct stop")

    # Clone the VM (full: it is no template), then convert the source into a template and clone it linked.
    upid = api.nodes("pve1").qemu(vmid).clone.post(newid=vmid + 10, name="py-clone")
    expect(":qmclone:%d:" % vmid in upid, "clone upid %s" % upid)
    expect(wait(api, "pve1", upid) == "OK", "clone")
    clone = api.nodes("pve1").qemu(vmid + 10).config.get()
    expect(clone["name"] == "py-clone" and clone["tags"] == "db;web", "clone %r" % clone)
    expect(clone["net0"] != conf["net0"], "clone keeps the MAC %r" % clone["net0"])
    expect(clone["scsi0"] == "local-lvm:vm-%d-disk-0,size=4G" % (vmid + 10), "clone disk %r" % clone["scsi0"])
    try:
        api.nodes("pve1").qemu(vmid).clone.post(newid=vmid + 11, start=1)
        raise SystemExit("FAIL: clone with start accepted")
    except ResourceException as e:
        expect(e.status_code == 400 and "Parameter verification failed" in str(e), "clone with start %s" % e)
    expect(wait(api, "pve1", api.nodes("pve1").qemu(vmid).template.post()) == "OK", "template")
    tpl = api.nodes("pve1").qemu(vmid).config.get()
    expect(tpl["template"] == 1 and tpl["scsi0"].startswith("local-lvm:base-%d-disk-0" % vmid), "template %r" % tpl)
    expect(wait(api, "pve1", api.nodes("pve1").qemu(vmid).clone.post(newid=vmid + 12)) == "OK", "linked clone")
    linked = api.nodes("pve1").qemu(vmid + 12).config.get()
    expect(linked["scsi0"].startswith("local-lvm:base-%d-disk-0/vm-%d-disk-0" % (vmid, vmid + 12)), "linked %r" % linked)

    # Download an ISO from a loopback URL with its checksum; it shows up with its real size.
    upid = api.nodes("pve1").storage("local")("download-url").post(
        url=files + "/debian.iso", content="iso", filename="debian.iso",
        checksum=iso_sha, **{"checksum-algorithm": "sha256"})
    expect(wait(api, "pve1", upid) == "OK", "iso download")
    isos = api.nodes("pve1").storage("local").content.get(content="iso")
    expect([i["volid"] for i in isos] == ["local:iso/debian.iso"] and isos[0]["size"] > 0, "isos %r" % isos)

    # Import a disk image: download a qcow2 to import content, then create a disk from it.
    upid = api.nodes("pve1").storage("local")("download-url").post(
        url=files + "/noble.qcow2", content="import", filename="noble.qcow2",
        checksum=qcow_sha, **{"checksum-algorithm": "sha256"})
    expect(wait(api, "pve1", upid) == "OK", "qcow2 download")
    imported = vmid + 20
    upid = api.nodes("pve1").qemu.post(vmid=imported, scsi0="local-lvm:0,import-from=local:import/noble.qcow2")
    expect(wait(api, "pve1", upid) == "OK", "import-from create")
    disk = api.nodes("pve1").qemu(imported).config.get()["scsi0"]
    expect(disk == "local-lvm:vm-%d-disk-0,size=2G" % imported, "imported disk %r" % disk)
    imports = [i["volid"] for i in api.nodes("pve1").storage("local").content.get(content="import")]
    expect(imports == ["local:import/noble.qcow2"], "import source kept %r" % imports)
    # Migrate the full clone, whose disk is local, to pve3: the precondition lists the disk, the qmigrate task
    # copies it and the config moves.
    pre = api.nodes("pve1").qemu(vmid + 10).migrate.get(target="pve3")
    expect(pre["running"] == 0 and [d["volid"] for d in pre["local_disks"]] == ["local-lvm:vm-%d-disk-0" % (vmid + 10)],
           "migrate precondition %r" % pre)
    upid = api.nodes("pve1").qemu(vmid + 10).migrate.post(target="pve3")
    expect(":qmigrate:%d:" % (vmid + 10) in upid, "migrate upid %s" % upid)
    expect(wait(api, "pve1", upid) == "OK", "migrate")
    expect(api.nodes("pve3").qemu(vmid + 10).config.get()["scsi0"].startswith("local-lvm:vm-%d-disk-0" % (vmid + 10)),
           "migrated config")
    expect(wait(api, "pve3", api.nodes("pve3").qemu(vmid + 10).delete()) == "OK", "destroy the migrated VM")
    for extra in (vmid + 12, imported):
        expect(wait(api, "pve1", api.nodes("pve1").qemu(extra).delete()) == "OK", "destroy %d" % extra)

    resources = api.cluster.resources.get(type="vm")
    expect(sorted(r["vmid"] for r in resources) == [vmid, ctid], "resources %r" % resources)

    # A ticket login with root's password works too.
    root = ProxmoxAPI(host, port=int(port), user="root@pam", password=rootpw, verify_ssl=False)
    expect(wait(root, "pve1", root.nodes("pve1").qemu(vmid).delete()) == "OK", "qemu destroy")
    expect(wait(root, "pve2", root.nodes("pve2").lxc(ctid).delete()) == "OK", "lxc destroy")
    expect(root.cluster.resources.get(type="vm") == [], "guests left")
    print("proxmoxer: all checks passed")


if __name__ == "__main__":
    main()
