package pvesim_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	proxmox "github.com/luthermonson/go-proxmox"

	"github.com/proxops/proxops/internal/pvesim"
)

// The Go client ProxOps uses sends JSON bodies on its raw Post/Put calls; the simulator takes them like
// form bodies (JSON booleans and numbers included).
func TestGoProxmoxRawCallsSendJSONBodies(t *testing.T) {
	c := defaultCluster(t)
	client := proxmox.NewClient(c.srv.URL+"/api2/json",
		proxmox.WithAPIToken(pvesim.DefaultRootTokenID, pvesim.DefaultRootTokenSecret))
	ctx := context.Background()
	var upid string
	err := client.Post(ctx, "/nodes/pve1/qemu", map[string]any{
		"vmid": 100, "name": "json-vm", "memory": "1024", "cores": 2, "onboot": true,
		"scsi0": "local-lvm:1", "net0": "virtio,bridge=vmbr0", "tags": "Web,db",
	}, &upid)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	if !strings.Contains(upid, ":qmcreate:100:root@pam!proxops:") {
		t.Fatalf("upid %q", upid)
	}
	if st := c.waitTask(upid); st != "OK" {
		t.Fatalf("create task %s", st)
	}
	var conf map[string]json.RawMessage
	if err := client.Get(ctx, "/nodes/pve1/qemu/100/config", &conf); err != nil {
		t.Fatal(err)
	}
	var digest string
	_ = json.Unmarshal(conf["digest"], &digest)
	if string(conf["onboot"]) != "1" || string(conf["tags"]) != `"db;web"` || string(conf["cores"]) != "2" {
		t.Fatalf("config after a JSON create: %v", conf)
	}
	var out json.RawMessage
	if err := client.Put(ctx, "/nodes/pve1/qemu/100/config", map[string]any{"cores": 4, "protection": false, "digest": digest}, &out); err != nil {
		t.Fatalf("update: %v", err)
	}
	got, _ := c.sim.Config(100)
	if got["cores"] != "4" || got["protection"] != "0" {
		t.Fatalf("config after a JSON update: %v", got)
	}
	err = client.Put(ctx, "/nodes/pve1/qemu/100/config", map[string]any{"cores": 8, "digest": digest}, &out)
	var apiErr *proxmox.APIError
	if err == nil || !asAPIError(err, &apiErr) || apiErr.StatusCode != 500 || !strings.Contains(apiErr.Message, "checksum mismatch") {
		t.Fatalf("stale digest: %v", err)
	}
	// A string "true" is not a boolean, in JSON as in forms.
	err = client.Put(ctx, "/nodes/pve1/qemu/100/config", map[string]any{"onboot": "true"}, &out)
	if err == nil || !asAPIError(err, &apiErr) || apiErr.StatusCode != 400 {
		t.Fatalf("string boolean: %v", err)
	}
}

func asAPIError(err error, target **proxmox.APIError) bool { return errors.As(err, target) }
