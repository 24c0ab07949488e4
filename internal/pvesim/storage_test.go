package pvesim_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/proxops/proxops/internal/pvesim"
)

// qcow2Image is a minimal qcow2 header announcing a virtual size.
func qcow2Image(virtual uint64) []byte {
	b := make([]byte, 1024)
	copy(b, []byte{'Q', 'F', 'I', 0xfb})
	binary.BigEndian.PutUint32(b[4:], 3)
	binary.BigEndian.PutUint64(b[24:], virtual)
	return b
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// fileServer serves files on loopback.
func fileServer(t *testing.T, files map[string][]byte) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, ok := files[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write(b)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func storageCluster(t *testing.T) *testCluster {
	spec := pvesim.DefaultSpec()
	spec.Storages = append(spec.Storages, pvesim.StorageSpec{ID: "isos", Type: "dir", Content: []string{"iso"}})
	return newCluster(t, spec)
}

// A loopback URL is really fetched: the file appears with its real size and format; a wrong checksum, an
// existing file without checksum and a matching existing file behave as download_file_from_url does.
func TestDownloadURLFromLoopback(t *testing.T) {
	iso := bytes.Repeat([]byte("debian"), 1000)
	srv := fileServer(t, map[string][]byte{"/debian.iso": iso})
	c := storageCluster(t)
	upid, st := c.taskOf("POST", "/nodes/pve1/storage/local/download-url", form("url", srv.URL+"/debian.iso",
		"content", "iso", "filename", "debian.iso", "checksum", sha256Hex(iso), "checksum-algorithm", "sha256"))
	if st != "OK" || !strings.Contains(upid, ":download:debian.iso:") {
		t.Fatalf("download %s: %s", upid, st)
	}
	vol := c.content("pve1", "local", form("content", "iso"))["local:iso/debian.iso"]
	if vol == nil || vol["size"] != float64(len(iso)) || vol["format"] != "iso" {
		t.Fatalf("listing %v", vol)
	}
	log := string(c.do("GET", "/nodes/pve1/tasks/"+upid+"/log", nil).Data)
	for _, want := range []string{"downloading " + srv.URL + "/debian.iso to /var/lib/vz/template/iso/debian.iso",
		"calculating checksum...OK, checksum verified", "download of '" + srv.URL + "/debian.iso' to '/var/lib/vz/template/iso/debian.iso' finished"} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %q: %s", want, log)
		}
	}
	_, st = c.taskOf("POST", "/nodes/pve1/storage/local/download-url", form("url", srv.URL+"/debian.iso",
		"content", "iso", "filename", "debian.iso"))
	if st != "refusing to override existing file '/var/lib/vz/template/iso/debian.iso'" {
		t.Fatalf("existing file without checksum: %q", st)
	}
	upid, st = c.taskOf("POST", "/nodes/pve1/storage/local/download-url", form("url", srv.URL+"/debian.iso",
		"content", "iso", "filename", "debian.iso", "checksum", sha256Hex(iso), "checksum-algorithm", "sha256"))
	if log := string(c.do("GET", "/nodes/pve1/tasks/"+upid+"/log", nil).Data); st != "OK" || !strings.Contains(log, "OK, got correct file already, no need to download") {
		t.Fatalf("existing matching file: %s %s", st, log)
	}
	wrong := strings.Repeat("0", 64)
	_, st = c.taskOf("POST", "/nodes/pve1/storage/local/download-url", form("url", srv.URL+"/debian.iso",
		"content", "iso", "filename", "other.iso", "checksum", wrong, "checksum-algorithm", "sha256"))
	if st != "checksum mismatch: got '"+sha256Hex(iso)+"' != expect '"+wrong+"'" {
		t.Fatalf("wrong checksum: %q", st)
	}
	if c.content("pve1", "local", nil)["local:iso/other.iso"] != nil {
		t.Fatal("a failed download must not leave a file")
	}
}

// Storage, content and filename checks are synchronous; filenames are normalised.
func TestDownloadURLChecks(t *testing.T) {
	c := storageCluster(t)
	tests := []struct {
		name, storage string
		form          []string
		status        int
		key, want     string
	}{
		{"block storage", "local-lvm", []string{"content", "iso", "filename", "x.iso"}, 500, "", "can't upload to storage type 'lvmthin', not a file based storage!"},
		{"content not configured", "isos", []string{"content", "import", "filename", "x.qcow2"}, 500, "", "storage 'isos' is not configured for content-type 'import'"},
		{"iso extension", "local", []string{"content", "iso", "filename", "x.qcow2"}, 400, "filename", "wrong file extension"},
		{"vztmpl extension", "local", []string{"content", "vztmpl", "filename", "x.zip"}, 400, "filename", "wrong file extension"},
		{"import extension", "local", []string{"content", "import", "filename", "x.iso"}, 400, "filename", "invalid filename or wrong extension"},
		{"checksum needs its algorithm", "local", []string{"content", "iso", "filename", "x.iso", "checksum", "ab"}, 400, "checksum-algorithm", "missing property - 'checksum' requires this property"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := form(append([]string{"url", "https://example.com/file"}, tc.form...)...)
			expectErr(t, c.do("POST", "/nodes/pve1/storage/"+tc.storage+"/download-url", f), tc.status, tc.key, tc.want)
		})
	}
	// No mirror and no checksum: synthetic content under the normalised name.
	c.mustTask("POST", "/nodes/pve1/storage/local/download-url", form("url", "https://example.com/x.tar.zst",
		"content", "vztmpl", "filename", "my template (1).tar.zst"))
	if v := c.content("pve1", "local", nil)["local:vztmpl/my_template__1_.tar.zst"]; v == nil || v["format"] != "tzst" {
		t.Fatalf("normalised synthetic download %v", c.content("pve1", "local", nil))
	}
	// No mirror with a checksum: the task names the missing mirror.
	_, st := c.taskOf("POST", "/nodes/pve1/storage/local/download-url", form("url", "https://example.com/y.iso",
		"content", "iso", "filename", "y.iso", "checksum", "ab", "checksum-algorithm", "md5"))
	if !strings.Contains(st, "no mirror for 'https://example.com/y.iso'") {
		t.Fatalf("unmirrored download with checksum: %q", st)
	}
	// A mirrored URL is served from the local file.
	path := filepath.Join(t.TempDir(), "noble.qcow2")
	img := qcow2Image(2 << 30)
	if err := os.WriteFile(path, img, 0o600); err != nil {
		t.Fatal(err)
	}
	c.sim.SetMirror("https://cloud-images.example/noble.qcow2", path)
	c.mustTask("POST", "/nodes/pve1/storage/local/download-url", form("url", "https://cloud-images.example/noble.qcow2",
		"content", "import", "filename", "noble.qcow2", "checksum", sha256Hex(img), "checksum-algorithm", "sha256"))
	if v := c.content("pve1", "local", form("content", "import"))["local:import/noble.qcow2"]; v == nil || v["size"] != float64(len(img)) || v["format"] != "qcow2" {
		t.Fatalf("mirrored import %v", v)
	}
	// Importing it into a VM disk uses the image's virtual size.
	c.mustTask("POST", "/nodes/pve1/qemu", form("vmid", "100", "scsi0", "local-lvm:0,import-from=local:import/noble.qcow2"))
	if got := c.config("pve1", "qemu", 100)["scsi0"]; got != "local-lvm:vm-100-disk-0,size=2G" {
		t.Fatalf("imported disk %v", got)
	}
}

func multipartBody(t *testing.T, fields [][2]string, fileName string, data []byte, after [][2]string) (*bytes.Buffer, string) {
	var buf bytes.Buffer
	w := multipart.NewWriter(&buf)
	for _, f := range fields {
		_ = w.WriteField(f[0], f[1])
	}
	fw, err := w.CreateFormFile("filename", fileName)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = fw.Write(data)
	for _, f := range after {
		_ = w.WriteField(f[0], f[1])
	}
	_ = w.Close()
	return &buf, w.FormDataContentType()
}

// Uploads are multipart: content and checksum fields before the file part, sent to the node itself.
func TestUploadFollowsFieldOrderAndNode(t *testing.T) {
	c := storageCluster(t)
	pve2 := httptest.NewServer(c.sim.NodeHandler("pve2"))
	t.Cleanup(pve2.Close)
	data := []byte("an iso image")
	upload := func(base, node string, fields [][2]string, after [][2]string) reply {
		body, ct := multipartBody(t, fields, "upload.iso", data, after)
		req, _ := http.NewRequest("POST", base+"/api2/json/nodes/"+node+"/storage/local/upload", body)
		req.Header.Set("Content-Type", ct)
		req.Header.Set("Authorization", rootToken)
		return c.send(req)
	}
	r := upload(c.srv.URL, "pve1", [][2]string{{"content", "iso"}, {"checksum-algorithm", "sha256"}, {"checksum", sha256Hex(data)}}, nil)
	if r.Status != 200 || !strings.Contains(r.str(t), ":imgcopy::") {
		t.Fatalf("upload: %d %s %s", r.Status, r.Message, r.Data)
	}
	if st := c.waitTask(r.str(t)); st != "OK" {
		t.Fatalf("upload task %s", st)
	}
	if v := c.content("pve1", "local", nil)["local:iso/upload.iso"]; v == nil || v["size"] != float64(len(data)) {
		t.Fatalf("uploaded file %v", v)
	}
	expectErr(t, upload(c.srv.URL, "pve1", nil, [][2]string{{"content", "iso"}}), 400, "content", "property is missing and it is not optional")
	expectErr(t, upload(c.srv.URL, "pve2", [][2]string{{"content", "iso"}}, nil), 500, "", "unable to proxy file uploads")
	r = upload(pve2.URL, "pve2", [][2]string{{"content", "iso"}, {"checksum-algorithm", "sha256"}, {"checksum", strings.Repeat("1", 64)}}, nil)
	if st := c.waitTask(r.str(t)); !strings.HasPrefix(st, "checksum mismatch: got '"+sha256Hex(data)+"'") {
		t.Fatalf("upload with a wrong checksum: %q", st)
	}
	r = upload(pve2.URL, "pve2", [][2]string{{"content", "iso"}}, nil)
	if st := c.waitTask(r.str(t)); st != "OK" {
		t.Fatalf("upload to pve2 through its own API: %q", st)
	}
}

// A loopback server may redirect within loopback, but a redirect off loopback ends the download task
// in failure before any connection leaves loopback.
func TestDownloadURLRefusesRedirectsOffLoopback(t *testing.T) {
	iso := bytes.Repeat([]byte("boot"), 256)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/moved.iso":
			http.Redirect(w, r, "/real.iso", http.StatusFound)
		case "/real.iso":
			_, _ = w.Write(iso)
		case "/away.iso":
			http.Redirect(w, r, "http://192.0.2.1/x.iso", http.StatusFound)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	c := storageCluster(t)
	c.mustTask("POST", "/nodes/pve1/storage/local/download-url", form("url", srv.URL+"/moved.iso",
		"content", "iso", "filename", "moved.iso", "checksum", sha256Hex(iso), "checksum-algorithm", "sha256"))
	if v := c.content("pve1", "local", nil)["local:iso/moved.iso"]; v == nil || v["size"] != float64(len(iso)) {
		t.Fatalf("download through a loopback redirect: %v", v)
	}
	start := time.Now()
	_, st := c.taskOf("POST", "/nodes/pve1/storage/local/download-url", form("url", srv.URL+"/away.iso",
		"content", "iso", "filename", "away.iso"))
	if !strings.HasPrefix(st, "download failed: ") || !strings.Contains(st, "redirect to 'http://192.0.2.1/x.iso'") ||
		!strings.Contains(st, "only connects to loopback") {
		t.Fatalf("redirect off loopback: task ended %q", st)
	}
	// A dial towards 192.0.2.1 would wait for the connect timeout; refusing the redirect does not dial.
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("refusing the redirect took %v, as if a connection had been attempted", d)
	}
	if c.content("pve1", "local", nil)["local:iso/away.iso"] != nil {
		t.Fatal("a refused download must not leave a file")
	}
}
