package manifest_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/proxops/proxops/internal/manifest"
)

func TestBackupJobIDIsTheNameWhenPVEAcceptsIt(t *testing.T) {
	for name, want := range map[string]string{
		"nightly":               "nightly",
		"1-web":                 "backup-1-web",
		"a":                     "backup-a",
		strings.Repeat("b", 50): strings.Repeat("b", 50),
		strings.Repeat("c", 60): "backup-" + strings.Repeat("c", 43),
	} {
		got := manifest.BackupJobID(name)
		if got != want || manifest.BackupJobIDError(got) != "" {
			t.Errorf("BackupJobID(%q) = %q (%s), want %q", name, got, manifest.BackupJobIDError(got), want)
		}
	}
}

func TestABackupJobReportsEachBadFieldWithItsPosition(t *testing.T) {
	doc := `apiVersion: proxops/v1alpha1
kind: BackupJob
metadata: {name: nightly}
spec:
  id: 9bad
  schedule: "mon..fri 25:00"
  selection: {all: true, pool: web, guests: [web-01], exclude: [Bad_Name]}
  mode: fast
  compression: xz
  retention: {keep-all: true, keep-daily: 7}
  notes-template: "{{guestname}}"
  notification-mode: mail
  comment: "nightly [proxops]"
`
	_, diags := manifest.Parse("backup/lab/nightly.yaml", []byte(doc))
	var got []string
	for _, d := range diags {
		got = append(got, d.Field+" "+strconv.Itoa(d.Line)+":"+strconv.Itoa(d.Column))
	}
	want := []string{
		"spec.id 5:7",
		"spec.schedule 6:13",
		"spec.selection 7:3",
		"spec.selection.exclude 7:55",
		"spec.selection.exclude[0] 7:65",
		"spec.mode 8:9",
		"spec.compression 9:16",
		"spec.notification-mode 12:22",
		"spec.retention.keep-all 10:25",
		"spec.notes-template 11:19",
		"spec.comment 13:12",
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("diagnostics (-want +got):\n%s\n%s", d, diags.Error())
	}
}

func TestAGuestWithBackupFalseIsLeftOutOfPoolAndAllJobs(t *testing.T) {
	rs, diags := manifest.Parse("vm/lab/scratch.yaml", []byte(`apiVersion: proxops/v1alpha1
kind: VM
metadata: {name: scratch}
spec: {node: pve1, vmid: 120, backup: false, cpu: {type: host}}
`))
	if diags.HasErrors() || len(rs) != 1 {
		t.Fatalf("parse: %s", diags.Error())
	}
	if rs[0].GuestBackup() {
		t.Fatal("spec.backup: false reads as backed up")
	}
}
