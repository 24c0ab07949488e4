package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
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

// peakRSSMB runs the built proxops with args and returns its peak resident memory in MB: the last VmHWM of
// /proc/<pid>/status read while it ran (read every few milliseconds; it only grows). The rusage of a child
// is no measure here: Linux counts in it the resident memory of the process it was started from, which a
// benchmark's exceeds.
func peakRSSMB(tb testing.TB, args ...string) float64 {
	tb.Helper()
	cmd := exec.Command(proxopsBinary(tb), args...)
	var out syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	status := fmt.Sprintf("/proc/%d/status", cmd.Process.Pid)
	peak := 0.0
	for {
		if b, err := os.ReadFile(status); err == nil {
			for line := range strings.Lines(string(b)) {
				if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
					if kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64); err == nil {
						peak = max(peak, kb/1024)
					}
				}
			}
		}
		select {
		case err := <-done:
			if err != nil {
				tb.Fatalf("proxops %s: %v\n%s", strings.Join(args, " "), err, tail(out.String()))
			}
			if peak == 0 {
				tb.Skip("no /proc/<pid>/status on this system")
			}
			return peak
		case <-time.After(2 * time.Millisecond):
		}
	}
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
