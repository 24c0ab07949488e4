package report_test

import (
	"testing"

	"github.com/proxops/proxops/internal/event"
	"github.com/proxops/proxops/internal/plan"
	"github.com/proxops/proxops/internal/report"
)

// A failure whose message names a PVE task gives the same report in every run: the task id's pid, process
// start and start time are masked in last_error, and the node, type, id and user are kept; a message
// without a task id is kept as it is.
func TestTaskIDsInErrorsDoNotMakeReportsDiffer(t *testing.T) {
	history := func(upid string) report.ClusterStatus {
		h := newHistory()
		e := h.repo("c1", event.TriggerWebhook)
		r := runInfo("alpha", "c1", "run-1", e)
		return fold("alpha", e,
			h.planned(r, plan.Plan{Resources: declared, Operations: []plan.Operation{createWeb, configureDB}}),
			h.result(r, createWeb, plan.StatusFailed, "VM/web-01: record task "+upid+": nats: timeout"),
			h.finished(r, plan.OutcomeFailed, outcome(createWeb, plan.OpFailed, "VM/web-01: wait for task "+upid+": context canceled"),
				outcome(configureDB, plan.OpFailed, "VM 102 is locked (backup)")),
		)
	}
	first := history("UPID:pve1:00001A2B:0000040C:6B10190B:qmcreate:101:proxops@pve!proxops:")
	second := history("UPID:pve1:00002F00:00000416:6B10191E:qmcreate:101:proxops@pve!proxops:")
	web, _ := first.Resource("VM", "web-01")
	if want := "VM/web-01: wait for task UPID:pve1:*:*:*:qmcreate:101:proxops@pve!proxops:: context canceled"; web.LastError != want {
		t.Errorf("last_error %q, want %q", web.LastError, want)
	}
	if db, _ := first.Resource("VM", "db-01"); db.LastError != "VM 102 is locked (backup)" {
		t.Errorf("a message without a task id changed: %q", db.LastError)
	}
	other, _ := second.Resource("VM", "web-01")
	if other.LastError != web.LastError {
		t.Errorf("two runs differ: %q and %q", web.LastError, other.LastError)
	}
	for i, op := range first.Tracking.Operations {
		if op.Message != second.Tracking.Operations[i].Message {
			t.Errorf("operation %s: %q and %q", op.ID, op.Message, second.Tracking.Operations[i].Message)
		}
	}
}
