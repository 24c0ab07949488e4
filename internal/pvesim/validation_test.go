package pvesim_test

import (
	"net/http"
	"strings"
	"testing"
)

// Booleans inside property strings take PVE's parse_boolean forms (1/0, on/off, yes/no, true/false in
// any case) and are stored as 1 or 0; anything else is refused naming the value.
func TestPropertyStringBooleansAreNormalised(t *testing.T) {
	c := defaultCluster(t)
	c.mustTask("POST", "/nodes/pve1/qemu", form("vmid", "100", "scsihw", "virtio-scsi-single",
		"scsi0", "local-lvm:1,iothread=yes,ssd=true", "net0", "virtio,bridge=vmbr0,firewall=on,link_down=OFF"))
	conf := c.config("pve1", "qemu", 100)
	for key, want := range map[string][]string{
		"scsi0": {"iothread=1", "ssd=1"},
		"net0":  {"firewall=1", "link_down=0"},
	} {
		got, _ := conf[key].(string)
		for _, w := range want {
			if !strings.Contains(got, w) {
				t.Errorf("%s = %q lacks %q", key, got, w)
			}
		}
		for _, raw := range []string{"=yes", "=true", "=on", "=OFF"} {
			if strings.Contains(got, raw) {
				t.Errorf("%s = %q keeps the form %q", key, got, raw)
			}
		}
	}
	r := c.do("POST", "/nodes/pve1/qemu/100/config", form("net1", "virtio,bridge=vmbr0,firewall=maybe"))
	expectErr(t, r, 400, "net1", "type check ('boolean') failed - got 'maybe'")
	if _, ok := c.config("pve1", "qemu", 100)["net1"]; ok {
		t.Fatal("a refused value must not be stored")
	}
}

// Query-string parameters are merged over the body, as pve-http-server's extract_params does.
func TestQueryStringParametersOverrideTheBody(t *testing.T) {
	c := defaultCluster(t)
	c.mustTask("POST", "/nodes/pve1/qemu", form("vmid", "100", "name", "first"))
	req, err := http.NewRequest("PUT", c.srv.URL+"/api2/json/nodes/pve1/qemu/100/config?name=from-query",
		strings.NewReader(form("name", "from-body", "cores", "2").Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Authorization", rootToken)
	if r := c.send(req); r.Status != 200 {
		t.Fatalf("PUT: %d %s %v", r.Status, r.Message, r.Errors)
	}
	conf := c.config("pve1", "qemu", 100)
	if conf["name"] != "from-query" || conf["cores"] != float64(2) {
		t.Fatalf("name %v cores %v: want the query's name and the body's cores", conf["name"], conf["cores"])
	}
}
