package pve

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/proxops/proxops/internal/plan"
)

// Tasks are waited on here rather than with the library's Task.Wait: its status decoder asserts that
// numbers are JSON floats and panics on the numeric strings PVE's serialiser may produce.

// TaskStatus is a task's state as GET /nodes/{node}/tasks/{upid}/status reports it.
type TaskStatus struct {
	UPID    UPID
	Running bool
	// ExitStatus is set once the task stopped: OK, "WARNINGS: n" or the error text.
	ExitStatus string
}

// OK reports whether a stopped task succeeded (OK or WARNINGS: n, pve-common UPID.pm status_is_error).
func (s TaskStatus) OK() bool {
	return !s.Running && (s.ExitStatus == "OK" || strings.HasPrefix(s.ExitStatus, "WARNINGS:"))
}

// TaskError is a task that finished with an error exit status.
type TaskError struct {
	UPID       UPID
	ExitStatus string
	Log        []string
}

func (e *TaskError) Error() string {
	return fmt.Sprintf("task %s %s on %s failed: %s", e.UPID.Type, e.UPID.ID, e.UPID.Node, e.ExitStatus)
}

// logTail is how many task log lines a result keeps.
const logTail = 20

// successLogTypes are the task types whose log can tell how a successful task ended although its exit
// status is a plain "OK": a shutdown that timed out and stopped the guest by force (qemu-server's vm_stop
// logs "VM still running - terminating now with SIGTERM" with Perl's plain warn, which the task's warning
// count does not see).
var successLogTypes = map[string]bool{"qmshutdown": true, "vzshutdown": true}

// TaskStatus reads a task's status once.
func (c *Client) TaskStatus(ctx context.Context, upid UPID) (TaskStatus, error) {
	raw, err := c.get(ctx, "/nodes/{node}/tasks/{upid}/status", []string{upid.Node, upid.String()}, nil)
	if err != nil {
		return TaskStatus{}, fmt.Errorf("read task %s status: %w", upid, err)
	}
	o, err := raw.object()
	if err != nil {
		return TaskStatus{}, fmt.Errorf("read task %s status: %w", upid, err)
	}
	st := TaskStatus{UPID: upid, ExitStatus: o.str("exitstatus")}
	switch o.str("status") {
	case "running":
		st.Running = true
	case "stopped":
	default:
		return TaskStatus{}, fmt.Errorf("read task %s status: unexpected status %q", upid, o.str("status"))
	}
	return st, nil
}

// WaitTask waits for a task to stop, polling with backoff between TaskPollMin and TaskPollMax, calling
// progress (if not nil) after each poll while it runs. A task that fails returns a classified *Error
// holding a *TaskError with the log tail. The log tail is returned for a task that failed, that ended with
// warnings, or whose successful log says how it ended (successLogTypes); a task that ended plainly "OK"
// logged nothing a result needs, and its log is not read (one request less per task).
func (c *Client) WaitTask(ctx context.Context, upid UPID, progress func(TaskStatus)) ([]string, error) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, c.cfg.TaskTimeout)
	defer cancel()
	delay := c.cfg.TaskPollMin
	misses := 0
	for {
		st, err := c.TaskStatus(ctx, upid)
		switch {
		case err != nil && ctx.Err() != nil:
			c.taskMetric(upid, "error", start)
			return nil, failed(ctx.Err(), "wait for task %s", upid)
		case err != nil:
			// Status reads are retried by the read client already; a few more misses are tolerated
			// (a node briefly unreachable) before the wait gives up as retryable.
			misses++
			if misses > 5 || ClassOf(err) != plan.ErrorRetryable {
				c.taskMetric(upid, "error", start)
				return nil, failed(err, "wait for task")
			}
		case !st.Running:
			var tail []string
			if st.ExitStatus != "OK" || successLogTypes[upid.Type] {
				tail = c.TaskLog(ctx, upid)
			}
			if st.OK() {
				c.taskMetric(upid, "ok", start)
				return tail, nil
			}
			c.taskMetric(upid, "failed", start)
			te := &TaskError{UPID: upid, ExitStatus: st.ExitStatus, Log: tail}
			class, lock := classifyText(st.ExitStatus, plan.ErrorTerminal)
			return tail, &Error{Class: class, Lock: lock, UPID: upid.String(), TaskLog: tail, Err: te}
		default:
			misses = 0
			if progress != nil {
				progress(st)
			}
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
		case <-t.C:
		}
		delay = min(delay*3/2, c.cfg.TaskPollMax)
	}
}

func (c *Client) taskMetric(upid UPID, result string, start time.Time) {
	if c.cfg.Metrics != nil {
		c.cfg.Metrics.Task(upid.Type, result, time.Since(start))
	}
}

// TaskLog returns the last lines of a task's log (best effort: nil when it cannot be read).
func (c *Client) TaskLog(ctx context.Context, upid UPID) []string {
	const page = 500
	var lines []string
	for start := 0; start < 20*page; start += page {
		q := url.Values{"start": {strconv.Itoa(start)}, "limit": {strconv.Itoa(page)}}
		raw, err := c.get(ctx, "/nodes/{node}/tasks/{upid}/log", []string{upid.Node, upid.String()}, q)
		if err != nil {
			break
		}
		items, err := raw.objects()
		if err != nil {
			break
		}
		for _, it := range items {
			lines = append(lines, it.str("t"))
		}
		if len(lines) > logTail {
			lines = slices.Clone(lines[len(lines)-logTail:])
		}
		if len(items) < page {
			break
		}
	}
	if len(lines) == 1 && lines[0] == "no content" {
		return nil
	}
	return lines
}

// TaskQuery selects tasks of a node's task list.
type TaskQuery struct {
	Node string
	// Type is the task type (qmcreate, qmclone, vzcreate, download, qmdestroy, ...).
	Type string
	// ID is the task's id field (the vmid, the clone source, the encoded download file name).
	ID string
	// Since drops tasks that started before it (zero: no limit).
	Since time.Time
}

// FindTasks lists the tasks this adapter's principal started that match q, newest first, running ones
// included: how a restarted executor finds the task of a request it sent but could not record.
func (c *Client) FindTasks(ctx context.Context, q TaskQuery) ([]TaskEntry, error) {
	query := url.Values{"source": {"all"}, "typefilter": {q.Type}, "limit": {"200"}, "userfilter": {userOf(c.principal)}}
	if _, err := strconv.Atoi(q.ID); err == nil {
		query.Set("vmid", q.ID)
	}
	raw, err := c.get(ctx, "/nodes/{node}/tasks", []string{q.Node}, query)
	if err != nil {
		return nil, fmt.Errorf("list tasks on %s: %w", q.Node, err)
	}
	items, err := raw.objects()
	if err != nil {
		return nil, fmt.Errorf("list tasks on %s: %w", q.Node, err)
	}
	var out []TaskEntry
	for _, it := range items {
		u, err := ParseUPID(it.str("upid"))
		if err != nil {
			continue // a malformed entry is not ours
		}
		if u.Type != q.Type || u.ID != q.ID || u.User != c.principal || u.Node != q.Node {
			continue
		}
		if !q.Since.IsZero() && time.Unix(u.StartTime, 0).Before(q.Since) {
			continue
		}
		// In the task list, "status" is the exit status of a finished task and absent while it runs.
		e := TaskEntry{UPID: u, ExitStatus: it.str("status")}
		e.Running = e.ExitStatus == "" || e.ExitStatus == "running"
		if e.Running {
			e.ExitStatus = ""
		}
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b TaskEntry) int {
		if a.UPID.StartTime != b.UPID.StartTime {
			return int(b.UPID.StartTime - a.UPID.StartTime)
		}
		return strings.Compare(b.UPID.String(), a.UPID.String())
	})
	return out, nil
}

// TaskEntry is one task of a node's task list.
type TaskEntry struct {
	UPID       UPID
	Running    bool
	ExitStatus string
}

// userOf returns the user part of a principal (user@realm of user@realm!token).
func userOf(principal string) string {
	u, _, _ := strings.Cut(principal, "!")
	return u
}
