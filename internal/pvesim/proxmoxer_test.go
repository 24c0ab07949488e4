package pvesim_test

import (
	"bytes"
	"context"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/proxops/proxops/internal/pvesim"
)

// The unmodified Python proxmoxer client (Debian's python3-proxmoxer) lists, creates, configures with a
// digest, starts, stops, clones, templates and deletes guests, downloads an ISO and a disk image from a
// loopback URL and imports the image into a VM disk, against the simulator over HTTPS.
func TestProxmoxerClientWorksUnchanged(t *testing.T) {
	if err := exec.Command("/usr/bin/python3", "-c", "import proxmoxer").Run(); err != nil {
		t.Skip("skipping: /usr/bin/python3 lacks proxmoxer (apt-get install python3-proxmoxer)")
	}
	spec := pvesim.DefaultSpec()
	spec.Files = []pvesim.FileSpec{{VolID: "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst", Size: 120 << 20}}
	spec.TaskDurations = map[string]pvesim.Duration{"default": pvesim.Duration(5 * time.Millisecond)}
	sim, err := pvesim.New(spec)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sim.Serve(ctx, l, true, nil) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	user, name, _ := strings.Cut(pvesim.DefaultRootTokenID, "!")
	iso, img := bytes.Repeat([]byte("iso9660 "), 4096), qcow2Image(2<<30)
	files := fileServer(t, map[string][]byte{"/debian.iso": iso, "/noble.qcow2": img})
	cmd := exec.CommandContext(ctx, "/usr/bin/python3", "testdata/proxmoxer_client.py", "127.0.0.1", port,
		user, name, pvesim.DefaultRootTokenSecret, pvesim.DefaultRootPassword, files.URL, sha256Hex(iso), sha256Hex(img))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("proxmoxer script failed: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "all checks passed") {
		t.Fatalf("unexpected output:\n%s", out)
	}
}
