package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// writeGuestRepo writes a repository of n small VMs over 8 nodes (the files BenchmarkScale applies) and
// returns its root and the bytes of its files.
func writeGuestRepo(tb testing.TB, n int) (string, int64) {
	tb.Helper()
	root := filepath.Join(tb.TempDir(), "repo")
	files := map[string]string{"clusters/lab/config.yaml": "pve:\n  clusters:\n    lab:\n      base-url: https://pve.invalid:8006\n" +
		"      nodes: [pve1, pve2, pve3, pve4, pve5, pve6, pve7, pve8]\n"}
	var list strings.Builder
	list.WriteString("resources:\n")
	for i := range n {
		name := fmt.Sprintf("g-%05d", i)
		files["vm/lab/"+name+".yaml"] = benchVM(name, 1000+i, fmt.Sprintf("pve%d", i%8+1), 512)
		fmt.Fprintf(&list, "  - ../../vm/lab/%s.yaml\n", name)
	}
	files["clusters/lab/resources.yaml"] = list.String()
	var size int64
	for p, c := range files {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755); err != nil {
			tb.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, p), []byte(c), 0o644); err != nil {
			tb.Fatal(err)
		}
		size += int64(len(c))
	}
	return root, size
}

// peakRSSMB runs the built proxops with args and returns its peak resident memory in MB.
func peakRSSMB(tb testing.TB, args ...string) float64 {
	tb.Helper()
	cmd := exec.Command(proxopsBinary(tb), args...)
	if out, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("proxops %s: %v\n%s", strings.Join(args, " "), err, tail(string(out)))
	}
	ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	if !ok {
		tb.Skip("no resource usage on this system")
	}
	return float64(ru.Maxrss) / 1024 // kB on Linux
}

// BenchmarkValidateMemory reports the peak resident memory of `proxops validate` on a one-guest repository
// (the program's own baseline, MB-base) and on a 10,000-guest one (MB-peak, 2.5 MB of YAML), and how much
// the second grew above the first per byte of YAML (growth/bytes; the bar is at most 10).
func BenchmarkValidateMemory(b *testing.B) {
	small, _ := writeGuestRepo(b, 1)
	large, size := writeGuestRepo(b, 10000)
	for range b.N {
		base := peakRSSMB(b, "validate", "--repo", small)
		peak := peakRSSMB(b, "validate", "--repo", large)
		b.ReportMetric(base, "MB-base")
		b.ReportMetric(peak, "MB-peak")
		b.ReportMetric(float64(size)/(1<<20), "MB-yaml")
		b.ReportMetric((peak-base)/(float64(size)/(1<<20)), "growth/bytes")
	}
}
