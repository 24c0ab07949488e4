package pvesim

import (
	"bytes"
	"mime/multipart"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
)

func testSim(t testing.TB) *Sim {
	s, err := New(DefaultSpec())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// The property-string parser never panics, and what it accepts prints back to a string it accepts again
// with the same meaning.
func FuzzPropertyString(f *testing.F) {
	s := testSim(f)
	for _, seed := range []string{"virtio=BC:24:11:00:00:01,bridge=vmbr0,tag=10", "virtio,bridge=vmbr0", "e1000=,x",
		"local-lvm:vm-100-disk-0,size=32G,iothread=1", "local-lvm:8,import-from=local:import/a.qcow2", ",,=,", "a=b=c"} {
		f.Add("net0", seed)
		f.Add("scsi0", seed)
	}
	f.Fuzz(func(t *testing.T, key, data string) {
		p := s.qemuDesc.prop(key)
		if p == nil || p.FormatObject == nil {
			return
		}
		parsed, err := parsePropertyString(p.FormatObject, data, key)
		if err != nil {
			return
		}
		printed := printPropertyString(p.FormatObject, parsed)
		again, err := parsePropertyString(p.FormatObject, printed, key)
		if err != nil {
			if strings.Contains(data, ",") || strings.Contains(printed, "=") {
				return // values containing separators cannot round-trip, in PVE either
			}
			t.Fatalf("printed %q of %q does not parse: %v", printed, data, err)
		}
		if len(again) != len(parsed) {
			t.Fatalf("round trip of %q changed keys: %v vs %v", data, parsed, again)
		}
	})
}

// Schema validation of random parameters never panics and reports errors only for given or required keys.
func FuzzValidateParams(f *testing.F) {
	s := testSim(f)
	m := s.api.Method("/nodes/{node}/qemu", "POST")
	f.Add("vmid", "100", "net0", "virtio,bridge=vmbr0")
	f.Add("start", "true", "memory", "abc")
	f.Add("scsi31", "x", "tags", "a;b,c")
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2 string) {
		params := map[string]value{"node": {s: "pve1"}, k1: {s: v1}, k2: {s: v2}}
		for k := range validateParams(m, "qemu", params) {
			if _, given := params[k]; given {
				continue
			}
			if _, given := params[""]; given && k == "_root" {
				continue // an error about an empty parameter name is keyed _root
			}
			// An error about a sub-key of a property string is keyed <param>.<sub-key>.
			base := strings.SplitN(k, ".", 2)[0]
			if _, given := params[base]; !given && base != "vmid" {
				t.Fatalf("error for %q, which was not given", k)
			}
		}
	})
}

// The config-file parser never panics, and a parsed config re-renders to text that parses to the same
// current section.
func FuzzConfigFile(f *testing.F) {
	s := testSim(f)
	f.Add("qemu", "#descr\ncores: 2\nnet0: virtio=A2:C0:43:77:08:A0,bridge=vmbr0\n\n[snap]\ncores: 1\n")
	f.Add("lxc", "arch: amd64\nlxc.cgroup2.devices.allow: c 1:3 rwm\nrootfs: local:100/vm-100-disk-0.raw,size=8G\n[pve:pending]\nmemory: 1024\n")
	f.Add("qemu", "[PENDING]\ndelete: net1,!scsi1\n")
	f.Add("lxc", "#")
	f.Fuzz(func(t *testing.T, kind, raw string) {
		if kind != "qemu" && kind != "lxc" {
			return
		}
		d := s.desc(kind)
		cf, _ := parseConfigFile(d, 100, raw)
		text := renderConfigFile(kind, cf)
		again, _ := parseConfigFile(d, 100, text)
		if descr, ok := cf.current.conf["description"]; ok && (!perlTrue(descr) || len(perlSplitLines(descr)) == 0) {
			// write_vm_config and write_pct_config write a description only when Perl reads it as true, as the
			// lines split(/\n/) gives: an empty one, "0", and (LXC keeps the "\n" of a lone "#") one of line
			// breaks only are dropped.
			delete(cf.current.conf, "description")
		}
		if len(again.current.conf) != len(cf.current.conf) {
			t.Fatalf("re-render changed the current section:\n%q\n%v\n%v", text, cf.current.conf, again.current.conf)
		}
	})
}

// Upload filenames normalise to PVE's safe characters, and normalising twice changes nothing.
func FuzzNormalizeFilename(f *testing.F) {
	for _, seed := range []string{"debian.iso", "../../etc/passwd", `C:\x\y z.iso`, "my template (1).tar.zst", ""} {
		f.Add(seed)
	}
	safe := regexp.MustCompile(`^[a-zA-Z0-9_.\-]*$`)
	f.Fuzz(func(t *testing.T, name string) {
		n := normalizeFilename(name)
		if !safe.MatchString(n) || strings.ContainsAny(n, `/\`) {
			t.Fatalf("%q normalised to unsafe %q", name, n)
		}
		if normalizeFilename(n) != n {
			t.Fatalf("not idempotent: %q → %q → %q", name, n, normalizeFilename(n))
		}
	})
}

// The multipart upload parser never panics and only ever reads the fields it knows.
func FuzzUploadMultipart(f *testing.F) {
	f.Add("content", "iso", "x.iso", "data", "checksum", "ab")
	f.Add("checksum", "ab", "../a b.iso", "", "content", "vztmpl")
	f.Fuzz(func(t *testing.T, k1, v1, file, data, k2, v2 string) {
		var buf bytes.Buffer
		w := multipart.NewWriter(&buf)
		_ = w.WriteField(k1, v1)
		if fw, err := w.CreateFormFile("filename", file); err == nil {
			_, _ = fw.Write([]byte(data))
		}
		_ = w.WriteField(k2, v2)
		_ = w.Close()
		req := httptest.NewRequest("POST", "/api2/json/nodes/pve1/storage/local/upload", &buf)
		req.Header.Set("Content-Type", w.FormDataContentType())
		params, _, err := extractUpload(req, map[string]string{"node": "pve1", "storage": "local"})
		if err != nil {
			return
		}
		for k := range params {
			switch k {
			case "node", "storage", "filename", "content", "checksum", "checksum-algorithm":
			default:
				t.Fatalf("unexpected parameter %q", k)
			}
		}
		if _, ok := params[k2]; ok && k2 != k1 && k2 != "filename" && k2 != "node" && k2 != "storage" {
			t.Fatalf("field %q after the file part was read", k2)
		}
	})
}
