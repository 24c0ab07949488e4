package pvesim

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// The task engine: asynchronous endpoints return a UPID at once and do their work in a goroutine after
// the task type's duration, as pvedaemon workers do (pve-common src/PVE/RESTEnvironment.pm fork_worker,
// src/PVE/UPID.pm).

type task struct {
	upid string
	// parsable is whether upid is in the form PVE's task lookups accept (reUPID), decided once.
	parsable  bool
	node      string
	pid       int
	pstart    int
	starttime int64
	typ       string
	id        string
	user      string
	running   bool
	exit      string
	endtime   int64
	lines     []string
}

// TaskInfo describes a task to task hooks.
type TaskInfo struct {
	UPID, Node, Type, ID, User string
}

// TaskHook runs just before a task's work. A non-nil error fails the task with that message (fault
// injection); the work is then not done.
type TaskHook func(TaskInfo) error

// OnTask adds a task hook.
func (s *Sim) OnTask(h TaskHook) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.taskHooks = append(s.taskHooks, h)
}

// taskLog collects the log lines a task's work writes. Work running without s.mu (taskSpec.fetch) must
// use a taskLog with unlocked set, whose printf takes the mutex.
type taskLog struct {
	t        *task
	s        *Sim
	unlocked bool
}

func (l taskLog) printf(format string, a ...any) {
	lines := strings.Split(strings.TrimRight(fmt.Sprintf(format, a...), "\n"), "\n")
	if l.unlocked && l.s != nil {
		l.s.mu.Lock()
		defer l.s.mu.Unlock()
	}
	l.t.lines = append(l.t.lines, lines...)
}

var reUPID = regexp.MustCompile(`^UPID:([a-zA-Z0-9]([a-zA-Z0-9\-]*[a-zA-Z0-9])?):([0-9A-Fa-f]{8}):([0-9A-Fa-f]{8,9}):([0-9A-Fa-f]{8}):([^:\s/]+):([^:\s/]*):([^:\s/]+):$`)

// taskSpec describes a worker (RESTEnvironment fork_worker) and the locks it holds.
type taskSpec struct {
	node, typ, id, user string
	// held is a flock the handler took and hands to the worker (the fork inherits it in PVE); it is
	// released when the task ends.
	held *flock
	// lockKind/lockVMID: a config flock the worker itself takes before doing anything (lock_config
	// inside the worker), waiting up to lockTimeout; a timeout fails the task. lockShared takes it shared.
	lockKind    string
	lockVMID    int
	lockShared  bool
	lockTimeout time.Duration
	// extra is a second flock the worker takes after the first (clone: the target's).
	extraKind string
	extraVMID int
	// extraDelay is added to the task type's duration (a shutdown waiting for a guest that ignores ACPI).
	extraDelay time.Duration
	// prepare runs under s.mu when the task starts, before the duration: the first step of a worker
	// that marks the guest (a `lock:` property) and lets the flock go while the long part runs. A failure
	// ends the task at once; work does not run.
	prepare func(taskLog) error
	// fetch runs without s.mu after the duration and before work (downloads).
	fetch func(taskLog) error
	// work runs under s.mu.
	work func(taskLog) error
	// onFail runs under s.mu when the task fails before or in work (cleanup of placeholders).
	onFail func()
}

// startTask registers a running task and runs work (under the state lock) once the type's duration has
// passed. The caller holds s.mu. It returns the UPID.
func (s *Sim) startTask(nodeName, typ, id, user string, work func(taskLog) error) string {
	return s.spawn(&taskSpec{node: nodeName, typ: typ, id: id, user: user, work: work})
}

// lockingWorker is a worker for guest vmid on the request's node that takes the guest's config flock
// itself before work (lock_config inside the worker), waiting the default timeout.
func (s *Sim) lockingWorker(c *call, typ, kind string, vmid int, work func(taskLog) error) *taskSpec {
	return &taskSpec{node: c.str("node"), typ: typ, id: strconv.Itoa(vmid), user: c.user,
		lockKind: kind, lockVMID: vmid, lockTimeout: s.lockTimeout("default"), work: work}
}

// heldWorker is a worker for guest vmid on the request's node that inherits the flock its handler holds.
func heldWorker(c *call, typ string, vmid int, h *flockHold, work func(taskLog) error) *taskSpec {
	return &taskSpec{node: c.str("node"), typ: typ, id: strconv.Itoa(vmid), user: c.user, held: h.hand(), work: work}
}

// reloadGuest is a worker's load_config of the guest its handler found: it fails the task when the
// config at cfgPath is gone since.
func (s *Sim) reloadGuest(vmid int, cfgPath string) (*guest, error) {
	g, ok := s.guests[vmid]
	if !ok {
		return nil, fmt.Errorf("Configuration file '%s' does not exist", cfgPath)
	}
	return g, nil
}

// holdNewGuest starts a create handler: the pool must exist, and the new guest's flock is taken first
// (create_and_lock_config, with the create timeout) to be handed to the worker. o is the guest that has the
// vmid already, if any.
func (s *Sim) holdNewGuest(c *call, kind string) (h *flockHold, o *guest, err error) {
	if err := s.checkPool(c.str("pool")); err != nil {
		return nil, nil, err
	}
	if h, err = s.holdGuestFlock(kind, c.vmid(), "create"); err != nil {
		return nil, nil, err
	}
	return h, s.guests[c.vmid()], nil
}

// newGuest is the guest a create request makes, on the request's node and in its pool, with an empty
// config.
func newGuest(c *call, kind string) *guest {
	return &guest{vmid: c.vmid(), kind: kind, node: c.str("node"), file: &configFile{current: newSection(),
		snapshots: map[string]*section{}, special: map[string]*section{}}, createdAt: time.Now(), pool: c.str("pool")}
}

// spawnCreate registers the new guest g under `lock: create` and forks the create worker (create_vm),
// which inherits the flock h: build finishes the guest, then the lock goes, with ha-managed=1 the guest
// becomes an HA resource (state started with start=1, as Qemu.pm and LXC.pm create_vm add vm:<id> or
// ct:<id>), and with start=1 start runs it. A worker that fails before it finished the guest (the lock
// is still there) leaves nothing: PVE deletes the config file.
func (s *Sim) spawnCreate(c *call, g *guest, typ string, h *flockHold, build, start func(*guest, taskLog) error) string {
	vmid := g.vmid
	g.conf()["lock"] = "create"
	g.write()
	s.guests[vmid] = g
	starting := c.str("start") == "1"
	haManaged := c.str("ha-managed") == "1"
	ts := heldWorker(c, typ, vmid, h, func(l taskLog) error {
		g := s.guests[vmid]
		if err := build(g, l); err != nil {
			return err
		}
		delete(g.conf(), "lock")
		g.write()
		if haManaged {
			g.ha, g.haState = true, "stopped"
			if starting {
				g.haState = "started"
			}
		}
		if starting {
			return start(g, l)
		}
		return nil
	})
	ts.onFail = func() {
		if s.guests[vmid] == g && g.conf()["lock"] == "create" {
			delete(s.guests, vmid)
		}
	}
	return s.spawn(ts)
}

// spawn starts a task as described. The caller holds s.mu. It returns the UPID.
func (s *Sim) spawn(ts *taskSpec) string {
	s.nextPID++
	now := time.Now()
	t := &task{node: ts.node, pid: s.nextPID, pstart: int(now.Sub(s.bootTime)/(10*time.Millisecond)) + 1000,
		starttime: now.Unix(), typ: ts.typ, id: ts.id, user: ts.user, running: true}
	t.upid = fmt.Sprintf("UPID:%s:%08X:%08X:%08X:%s:%s:%s:", ts.node, t.pid, t.pstart, t.starttime, ts.typ, ts.id, ts.user)
	t.parsable = reUPID.MatchString(t.upid)
	s.tasks[t.upid] = t
	s.taskOrder = append(s.taskOrder, t)
	d, ok := s.durations[ts.typ]
	if !ok {
		d = s.durations["default"]
	}
	d += ts.extraDelay
	hooks := append([]TaskHook(nil), s.taskHooks...)
	s.taskSeq++
	seq := s.taskSeq
	s.taskWG.Add(1)
	go func() {
		defer s.taskWG.Done()
		var err error
		var locks []*flock
		if ts.lockKind != "" {
			s.mu.Lock()
			var f *flock
			f, err = s.acquireFlock(ts.lockKind, ts.lockVMID, ts.lockShared, ts.lockTimeout)
			if err == nil {
				locks = append(locks, f)
				if ts.extraKind != "" {
					f, err = s.acquireFlock(ts.extraKind, ts.extraVMID, false, ts.lockTimeout)
					if err == nil {
						locks = append(locks, f)
					}
				}
			}
			s.mu.Unlock()
		}
		if err == nil && ts.prepare != nil {
			s.mu.Lock()
			err = ts.prepare(taskLog{t: t, s: s})
			s.mu.Unlock()
		}
		if err == nil && d > 0 {
			time.Sleep(d)
		}
		if err == nil {
			for _, h := range hooks {
				if err = h(TaskInfo{UPID: t.upid, Node: ts.node, Type: ts.typ, ID: ts.id, User: ts.user}); err != nil {
					break
				}
			}
		}
		if err == nil {
			err = s.injectedTaskFailure(seq, ts.typ)
		}
		warn := err == nil && s.injectedTaskWarning(seq, ts.typ)
		if err == nil && ts.fetch != nil {
			err = ts.fetch(taskLog{t: t, s: s, unlocked: true})
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		if err == nil {
			err = ts.work(taskLog{t: t, s: s})
		}
		if err != nil && ts.onFail != nil {
			ts.onFail()
		}
		for i := len(locks) - 1; i >= 0; i-- {
			s.releaseFlock(locks[i])
		}
		s.releaseFlock(ts.held)
		t.running = false
		t.endtime = time.Now().Unix()
		if err != nil {
			msg := strings.TrimRight(err.Error(), "\n")
			t.exit = msg
			t.lines = append(t.lines, "TASK ERROR: "+msg)
		} else if warn {
			t.exit = "WARNINGS: 1"
			t.lines = append(t.lines, "WARN: injected warning", "TASK WARNINGS: 1")
		} else {
			t.exit = "OK"
			t.lines = append(t.lines, "TASK OK")
		}
	}()
	return t.upid
}

// WaitTasks blocks until every task started so far has finished (for tests and clean shutdown).
func (s *Sim) WaitTasks() { s.taskWG.Wait() }

func (s *Sim) taskStatus(t *task) map[string]any {
	out := map[string]any{
		"upid": t.upid, "node": t.node, "pid": t.pid, "pstart": t.pstart, "starttime": t.starttime,
		"type": t.typ, "id": t.id, "user": t.user,
	}
	// Tasks.pm read_task_status splits a token user field into user and tokenid.
	if i := strings.Index(t.user, "!"); i >= 0 {
		out["user"] = t.user[:i]
		out["tokenid"] = t.user[i+1:]
	}
	if t.running {
		out["status"] = "running"
	} else {
		out["status"] = "stopped"
		out["exitstatus"] = t.exit
	}
	return out
}

func (s *Sim) handleTaskStatus(c *call) (any, error) {
	t, err := s.findTask(c)
	if err != nil {
		return nil, err
	}
	return s.taskStatus(t), nil
}

func (s *Sim) findTask(c *call) (*task, error) {
	upid := c.str("upid")
	t, ok := s.tasks[upid]
	if ok && !t.parsable || !ok && !reUPID.MatchString(upid) {
		return nil, paramErr(map[string]string{"upid": "unable to parse worker upid"})
	}
	if !ok || t.node != c.str("node") {
		return nil, dieErr("no such task")
	}
	return t, nil
}

func (s *Sim) handleTaskLog(c *call) (any, error) {
	t, err := s.findTask(c)
	if err != nil {
		return nil, err
	}
	start, limit := 0, 50
	if v, ok := c.params["start"]; ok {
		start, _ = strconv.Atoi(v.s)
	}
	if v, ok := c.params["limit"]; ok {
		limit, _ = strconv.Atoi(v.s)
	}
	lines := t.lines
	if t.running && len(lines) == 0 {
		lines = nil
	}
	out := []map[string]any{}
	for i := start; i < len(lines) && len(out) < limit; i++ {
		out = append(out, map[string]any{"n": i + 1, "t": lines[i]})
	}
	if len(lines) == 0 {
		out = append(out, map[string]any{"n": 1, "t": "no content"})
	}
	c.total = len(lines)
	return out, nil
}

func (s *Sim) handleTaskList(c *call) (any, error) {
	nodeName := c.str("node")
	vmid := c.str("vmid")
	typefilter := c.str("typefilter")
	source := c.str("source")
	if source == "" {
		source = "archive"
	}
	errorsOnly := c.str("errors") == "1"
	userfilter := c.str("userfilter")
	start, limit := 0, 50
	if v, ok := c.params["start"]; ok {
		start, _ = strconv.Atoi(v.s)
	}
	if v, ok := c.params["limit"]; ok {
		limit, _ = strconv.Atoi(v.s)
	}
	var matched []map[string]any
	for i := len(s.taskOrder) - 1; i >= 0; i-- {
		t := s.taskOrder[i]
		if t.node != nodeName {
			continue
		}
		if source == "active" && !t.running || source == "archive" && t.running {
			continue
		}
		if vmid != "" && t.id != vmid || typefilter != "" && !strings.Contains(t.typ, typefilter) ||
			userfilter != "" && !strings.Contains(t.user, userfilter) || errorsOnly && (t.running || t.exit == "OK") {
			continue
		}
		e := map[string]any{"upid": t.upid, "node": t.node, "pid": t.pid, "pstart": t.pstart,
			"starttime": t.starttime, "type": t.typ, "id": t.id, "user": t.user}
		if !t.running {
			e["status"] = t.exit
			e["endtime"] = t.endtime
		}
		matched = append(matched, e)
	}
	c.total = len(matched)
	out := []map[string]any{}
	for i := start; i < len(matched) && len(out) < limit; i++ {
		out = append(out, matched[i])
	}
	return out, nil
}

func (s *Sim) handleTaskStop(c *call) (any, error) {
	t, err := s.findTask(c)
	if err != nil {
		return nil, err
	}
	if t.running {
		// The simulator cannot interrupt work in flight; the stop is recorded in the log only.
		t.lines = append(t.lines, "received interrupt")
	}
	return nil, nil
}
