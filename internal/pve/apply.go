package pve

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/proxops/proxops/internal/clock"
	"github.com/proxops/proxops/internal/inventory"
	"github.com/proxops/proxops/internal/plan"
	"github.com/proxops/proxops/internal/pveformat"
)

// Journal records non-idempotent submissions (create, clone, download, delete) so that a later delivery
// of the same operation, maybe in another process, can find what was sent.
type Journal interface {
	// Intend is called right before the request is sent; an error stops the operation unsent.
	Intend(ctx context.Context, in Intent) error
	// Submitted is called as soon as PVE accepted the request, with its task's UPID.
	Submitted(ctx context.Context, upid UPID) error
}

// Intent describes a request about to be sent.
type Intent struct {
	// TaskType is the PVE task it starts (qmcreate, vzclone, download, qmdestroy, ...).
	TaskType string
	// Node runs the task; ID is the task's id field (vmid, clone source, file name).
	Node string
	ID   string
	// VMID is the guest the operation is about (0 for downloads).
	VMID int
	At   time.Time
}

// Prior is what an earlier delivery of the same operation recorded.
type Prior struct {
	// Intent is nil when nothing was recorded: the request was never sent.
	Intent *Intent
	// UPID is the task the earlier delivery started, when it lived to record it.
	UPID string
}

// SecretResolver resolves the secret references operations carry (cloud-init.ssh-keys.<name>,
// cloud-init.passwords.<name>) to their values.
type SecretResolver interface {
	Resolve(ctx context.Context, ref string) (string, error)
}

// Ownership gives Apply the ownership record ProxOps keeps of a guest (KV proxops_owned), as the executor
// reads it itself: never a fingerprint the operation carries.
type Ownership interface {
	// RecordedFingerprint returns the identity fingerprint recorded for a guest of the operation's cluster;
	// found is false when there is no record.
	RecordedFingerprint(ctx context.Context, vmid int) (fingerprint string, found bool, err error)
}

// ApplyOptions are the executor's hooks into one Apply.
type ApplyOptions struct {
	Journal  Journal
	Prior    Prior
	Progress func(TaskStatus)
	Secrets  SecretResolver
	// Ownership, when set, makes every write to an existing guest check ownership on the config read right
	// before it (see applier.owned). Nil skips the check: for callers that plan and apply in one trusted
	// process, and tests of the adapter alone.
	Ownership Ownership
	// Objects, when set, makes every write to a cluster object (a pool) check the object's ownership record
	// (see poolApplier.owned); nil skips the check, as for Ownership.
	Objects ObjectOwnership
	// Now is the clock for intents (default time.Now).
	Now func() time.Time
}

// Outcome is what a successful Apply did.
type Outcome struct {
	// UPID of the last task waited on; TaskLog its last lines.
	UPID    string
	TaskLog []string
	// AlreadyDone: PVE was found in the operation's target state (an earlier delivery did it, or a
	// no-op); nothing was written in this call, or only the remaining steps.
	AlreadyDone bool
	// Fingerprint is the guest's identity after create, clone and claim.
	Fingerprint string
	Message     string
}

// Apply applies one operation to PVE. It checks the operation's precondition against the live guest first,
// never sends a non-idempotent request twice without a fresh check of PVE (opts.Prior says what an earlier
// delivery sent), waits for the task it starts, and returns a classified *Error on failure.
func (c *Client) Apply(ctx context.Context, op plan.Operation, opts ApplyOptions) (Outcome, error) {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if slices.Contains(plan.FirewallObjectActions, op.Action) {
		return c.applyFirewallObject(ctx, op, opts)
	}
	if op.Action == plan.ActionApplyClusterFirewall {
		return c.applyClusterFirewall(ctx, op)
	}
	if op.Action.OnCluster() {
		if slices.Contains(plan.PoolActions, op.Action) {
			return c.applyPool(ctx, op, opts)
		}
		return c.applyClusterObject(ctx, op, opts)
	}
	a := &applier{c: c, op: op, opts: opts}
	if !pveformat.ValidNodeName(op.Node) {
		return Outcome{}, terminal("%s: invalid node %q", op.Action, op.Node)
	}
	if op.Action != plan.ActionDownload {
		if op.VMID < 100 || op.VMID > 999999999 {
			return Outcome{}, terminal("%s: invalid vmid %d", op.Action, op.VMID)
		}
		if op.GuestType != inventory.QEMU && op.GuestType != inventory.LXC {
			return Outcome{}, terminal("%s %d: unknown guest type %q", op.Action, op.VMID, op.GuestType)
		}
	}
	if err := op.CheckSecretRefs(); err != nil {
		return Outcome{}, terminal("refused: %v", err)
	}
	var err error
	switch op.Action {
	case plan.ActionCreate:
		err = a.create(ctx)
	case plan.ActionClone:
		err = a.clone(ctx)
	case plan.ActionConfigure, plan.ActionClaimTag:
		err = a.configure(ctx)
	case plan.ActionResize:
		err = a.resize(ctx)
	case plan.ActionStart, plan.ActionShutdown, plan.ActionStop, plan.ActionResume:
		err = a.power(ctx)
	case plan.ActionMarkTemplate:
		err = a.markTemplate(ctx)
	case plan.ActionDownload:
		err = a.download(ctx)
	case plan.ActionDelete:
		err = a.delete(ctx)
	case plan.ActionRegenerateCloudInit:
		err = a.regenerateCloudInit(ctx)
	case plan.ActionApplyGuestFirewall:
		err = a.applyGuestFirewall(ctx)
	case plan.ActionMigrate:
		err = a.migrate(ctx)
	case plan.ActionSnapshot:
		err = a.snapshot(ctx)
	case plan.ActionDeleteSnapshot:
		err = a.deleteSnapshot(ctx)
	case plan.ActionRollback:
		err = a.rollback(ctx)
	case plan.ActionHAMigrate:
		err = a.haMigrate(ctx)
	default:
		err = terminal("unknown action %q", op.Action)
	}
	if err != nil {
		e := classify(err)
		if e.UPID == "" {
			e.UPID = a.out.UPID
		}
		if e.TaskLog == nil {
			e.TaskLog = a.out.TaskLog
		}
		return a.out, e
	}
	return a.out, nil
}

type applier struct {
	c    *Client
	op   plan.Operation
	opts ApplyOptions
	out  Outcome
}

func (a *applier) typ() string  { return string(a.op.GuestType) }
func (a *applier) vmid() string { return strconv.Itoa(a.op.VMID) }

// what names the operation in errors: "create qemu 100".
func (a *applier) what() string {
	if a.op.Action == plan.ActionDownload {
		return fmt.Sprintf("download to %s on %s", a.op.Storage, a.op.Node)
	}
	return fmt.Sprintf("%s %s %d", a.op.Action, a.op.GuestType, a.op.VMID)
}

// send sends a write and returns the UPID it answered, or a zero UPID for a synchronous (null) answer.
func (a *applier) send(ctx context.Context, method, tmpl string, args []string, query url.Values,
	body map[string]string) (UPID, bool, error) {
	raw, err := a.c.send(ctx, true, (*answer).decoded, method, tmpl, args, query, body)
	if err != nil {
		return UPID{}, false, err
	}
	s, err := raw.text()
	if err != nil {
		return UPID{}, false, err
	}
	if s == "" {
		return UPID{}, false, nil
	}
	u, err := ParseUPID(s)
	if err != nil {
		return UPID{}, false, fmt.Errorf("pve answered %s %s: %w", method, tmpl, err)
	}
	return u, true, nil
}

// wait waits for a task and records it in the outcome.
func (a *applier) wait(ctx context.Context, u UPID) error {
	a.out.UPID = u.String()
	tail, err := a.c.WaitTask(ctx, u, a.opts.Progress)
	a.out.TaskLog = tail
	return err
}

// submit sends a non-idempotent request: the intent is journaled first, the UPID right after PVE accepted it.
func (a *applier) submit(ctx context.Context, in Intent, method, tmpl string, args []string, query url.Values,
	body map[string]string) (UPID, bool, error) {
	in.At = a.opts.Now()
	if a.opts.Journal != nil {
		if err := a.opts.Journal.Intend(ctx, in); err != nil {
			return UPID{}, false, failed(err, "%s: record intent", a.what())
		}
	}
	u, ok, err := a.send(ctx, method, tmpl, args, query, body)
	if err != nil {
		return UPID{}, false, err
	}
	if ok && a.opts.Journal != nil {
		if err := a.opts.Journal.Submitted(ctx, u); err != nil {
			// The task runs; the next delivery finds it through the node's task list.
			return u, true, failed(err, "%s: record task %s", a.what(), u)
		}
	}
	return u, ok, nil
}

// settlePrior waits for the tasks an earlier delivery may have started: the recorded UPID, or else the
// tasks this principal started of that type and id since the recorded intent. It reports whether one was
// found and the error of the newest one (nil when it succeeded).
func (a *applier) settlePrior(ctx context.Context, q TaskQuery) (bool, error) {
	p := a.opts.Prior
	if p.UPID != "" {
		u, err := ParseUPID(p.UPID)
		if err != nil {
			return false, terminal("%s: recorded task: %v", a.what(), err)
		}
		return true, a.wait(ctx, u)
	}
	if p.Intent == nil {
		return false, nil
	}
	q.Since = p.Intent.At.Add(-taskClockSkew)
	tasks, err := a.c.FindTasks(ctx, q)
	if err != nil {
		return false, failed(err, "%s: find earlier task", a.what())
	}
	if len(tasks) == 0 {
		return false, nil
	}
	for _, t := range tasks[1:] {
		if t.Running {
			_, _ = a.c.WaitTask(ctx, t.UPID, a.opts.Progress)
		}
	}
	newest := tasks[0]
	if a.opts.Journal != nil {
		if err := a.opts.Journal.Submitted(ctx, newest.UPID); err != nil {
			return true, failed(err, "%s: record task %s", a.what(), newest.UPID)
		}
	}
	return true, a.wait(ctx, newest.UPID)
}

// guestFree reports whether a vmid is unused cluster-wide (GET /cluster/nextid?vmid=N answers 400 when
// it is taken).
func (a *applier) guestFree(ctx context.Context, vmid int) (bool, error) {
	_, err := a.c.get(ctx, "/cluster/nextid", nil, url.Values{"vmid": {strconv.Itoa(vmid)}})
	if err == nil {
		return true, nil
	}
	if statusOf(err) == http.StatusBadRequest && strings.Contains(messageOf(err), "already exists") {
		return false, nil
	}
	return false, failed(err, "check vmid %d", vmid)
}

// readGuest reads a guest on a node; a missing guest is a conflict (the plan expected it).
func (a *applier) readGuest(ctx context.Context, node string, vmid int) (inventory.Guest, error) {
	g, ok, err := a.c.ReadGuest(ctx, node, a.op.GuestType, vmid)
	if err != nil {
		return g, failed(err, "%s: read config", a.what())
	}
	if !ok {
		return g, conflict("%s: %s %d does not exist on node %s", a.what(), a.op.GuestType, vmid, node)
	}
	return g, nil
}

// waitSettled waits until a guest carries none of the given config locks (a create or clone task still
// running), polling with the task backoff. The guest is looked for on each of nodes in turn (a clone with a
// target node moves there only when its task ends). ok is false when the guest is on none of them (the task
// failed and PVE removed its temporary config); node is where it was found.
func (a *applier) waitSettled(ctx context.Context, nodes []string, vmid int, locks ...string) (g inventory.Guest, node string, ok bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, a.c.cfg.TaskTimeout)
	defer cancel()
	delay := a.c.cfg.TaskPollMin
	for {
		ok = false
		for _, n := range slices.Compact(slices.Clone(nodes)) {
			g, ok, err = a.c.ReadGuest(ctx, n, a.op.GuestType, vmid)
			if err != nil {
				return g, n, false, failed(err, "%s: read config", a.what())
			}
			if ok {
				node = n
				break
			}
		}
		if !ok || !slices.Contains(locks, g.Lock) {
			return g, node, ok, nil
		}
		if a.opts.Progress != nil {
			a.opts.Progress(TaskStatus{Running: true})
		}
		if err := clock.Sleep(ctx, delay); err != nil {
			return g, node, false, failed(err, "%s: wait for lock %s", a.what(), g.Lock)
		}
		delay = min(delay*3/2, a.c.cfg.TaskPollMax)
	}
}

// owned checks, on a config just read and right before a write to the guest, that ProxOps owns it: the
// guest carries the ownership tag, and the ownership record the executor reads itself exists and holds the
// live guest's identity fingerprint. A hand clone of a managed guest (tag copied, new uuid or MACs) fails
// the second half. A claim is the one write to a guest ProxOps does not own yet: it is checked against what
// the plan observed instead, the identity fingerprint and the name, so only the guest the plan named is
// claimed. A refusal is terminal.
func (a *applier) owned(ctx context.Context, g inventory.Guest) error {
	if a.opts.Ownership == nil {
		return nil
	}
	fp := inventory.Fingerprint(g)
	if a.op.Action == plan.ActionClaimTag {
		pre := a.op.Precondition
		name, _ := g.Get(nameKey(a.op.GuestType))
		switch {
		case pre.Fingerprint == "":
			return refused(RefusalClaimMismatch, "%s: refused: a claim must carry the identity the plan observed", a.what())
		case fp != pre.Fingerprint:
			return refused(RefusalClaimMismatch, "%s: refused: the live guest's identity %q is not %q, which the plan observed; it is not claimed",
				a.what(), fp, pre.Fingerprint)
		case name != pre.Name:
			return refused(RefusalClaimMismatch, "%s: refused: the live guest is named %q, the plan observed %q; it is not claimed",
				a.what(), name, pre.Name)
		}
		return nil
	}
	if !pveformat.Owned(g.Tags) {
		return refused(RefusalNotOwned, "%s: refused: the live guest does not carry the %s tag", a.what(), pveformat.OwnershipTag)
	}
	rec, found, err := a.opts.Ownership.RecordedFingerprint(ctx, a.op.VMID)
	switch {
	case err != nil:
		return &Error{Class: plan.ErrorRetryable, Err: fmt.Errorf("%s: read the ownership record: %w", a.what(), err)}
	case !found:
		return refused(RefusalNotOwned, "%s: refused: the guest carries the %s tag, but ProxOps holds no ownership record of vmid %d",
			a.what(), pveformat.OwnershipTag, a.op.VMID)
	case rec == "" || rec != fp:
		return refused(RefusalNotOwned, "%s: refused: the live guest's identity %q is not the one recorded as ProxOps' (%q)",
			a.what(), fp, rec)
	}
	return nil
}

// readOwned reads the operation's guest and checks that ProxOps owns it (owned).
func (a *applier) readOwned(ctx context.Context) (inventory.Guest, error) {
	g, err := a.readGuest(ctx, a.op.Node, a.op.VMID)
	if err != nil {
		return g, err
	}
	return g, a.owned(ctx, g)
}

// nameKey is the config key of a guest's name.
func nameKey(t inventory.GuestType) string {
	if t == inventory.LXC {
		return "hostname"
	}
	return "name"
}

func (a *applier) finishGuest(ctx context.Context, node string, vmid int) error {
	g, err := a.readGuest(ctx, node, vmid)
	if err != nil {
		return err
	}
	a.out.Fingerprint = inventory.Fingerprint(g)
	return nil
}

// create is POST /nodes/{node}/qemu|lxc (tasks qmcreate, vzcreate).
func (a *applier) create(ctx context.Context) error {
	taskType := map[string]string{"qemu": "qmcreate", "lxc": "vzcreate"}[a.typ()]
	q := TaskQuery{Node: a.op.Node, Type: taskType, ID: a.vmid()}
	found, priorErr := a.settlePrior(ctx, q)
	free, err := a.guestFree(ctx, a.op.VMID)
	if err != nil {
		return err
	}
	if !free {
		if a.opts.Prior.Intent == nil {
			return conflict("%s: vmid %d already exists", a.what(), a.op.VMID)
		}
		// The intent record says this operation sent the create: the guest is the one it made, once the
		// create task (if still running) is over.
		g, _, ok, err := a.waitSettled(ctx, []string{a.op.Node}, a.op.VMID, "create")
		if err != nil {
			return err
		}
		if !ok {
			return conflict("%s: vmid %d exists, but not as a %s guest on node %s", a.what(), a.op.VMID, a.op.GuestType, a.op.Node)
		}
		a.out.AlreadyDone = true
		a.out.Fingerprint = inventory.Fingerprint(g)
		return nil
	}
	if found && priorErr != nil {
		a.out.Message = "earlier attempt failed: " + messageOf(priorErr)
	}
	body, err := a.values(ctx, a.op.Values, "vmid")
	if err != nil {
		return err
	}
	body["vmid"] = a.vmid()
	u, ok, err := a.submit(ctx, Intent{TaskType: taskType, Node: a.op.Node, ID: a.vmid(), VMID: a.op.VMID},
		http.MethodPost, "/nodes/{node}/"+a.typ(), []string{a.op.Node}, nil, body)
	if err != nil {
		return failed(err, "%s", a.what())
	}
	if ok {
		if err := a.wait(ctx, u); err != nil {
			return err
		}
	}
	return a.finishGuest(ctx, a.op.Node, a.op.VMID)
}

// clone is POST /nodes/{node}/qemu|lxc/{source}/clone (full unless the operation says full=0; never
// started: a clone request does not take start) followed by the post-clone config write (identity clearing:
// the operation's Values and Delete, disjoint; an inherited cloud-init drive is never rewritten).
//
// A redelivered clone does not search the node's task list: clone tasks carry the source's vmid, so several
// clones of one template cannot be told apart there. It relies on PVE's own marker instead: the new vmid is
// taken, with `lock: clone` (qemu) or `lock: create` (lxc), from the moment PVE accepts the request until
// the task ends, and is freed again when the task fails. With an intent recorded, a taken vmid is the
// earlier delivery's clone (its name is checked when the operation gives one); a free one means the earlier
// request never reached PVE or failed, so it is sent again after that fresh check.
func (a *applier) clone(ctx context.Context) error {
	src := a.op.SourceVMID
	if src < 100 {
		return terminal("%s: no clone source", a.what())
	}
	if v, ok := a.op.Param("newid"); ok && v != a.vmid() {
		return terminal("%s: newid %s differs from the operation's vmid", a.what(), v)
	}
	if err := disjoint(a.op); err != nil {
		return err
	}
	targetNode := a.op.Node
	if t, ok := a.op.Param("target"); ok && t != "" {
		if !pveformat.ValidNodeName(t) {
			return terminal("%s: invalid target node %q", a.what(), t)
		}
		targetNode = t
	}
	name, _ := a.op.Param("name")
	taskType := map[string]string{"qemu": "qmclone", "lxc": "vzclone"}[a.typ()]
	srcID := strconv.Itoa(src)
	var priorErr error
	if p := a.opts.Prior.UPID; p != "" {
		u, err := ParseUPID(p)
		if err != nil {
			return terminal("%s: recorded task: %v", a.what(), err)
		}
		// Its outcome is not this call's: the vmid check below decides what happened.
		priorErr = a.wait(ctx, u)
	}
	for round := 0; ; round++ {
		if round == 3 {
			return &Error{Class: plan.ErrorRetryable, Err: fmt.Errorf("%s: vmid %d keeps appearing and disappearing", a.what(), a.op.VMID)}
		}
		free, err := a.guestFree(ctx, a.op.VMID)
		if err != nil {
			return err
		}
		if free {
			if priorErr != nil {
				a.out.Message = "earlier attempt failed: " + messageOf(priorErr)
			}
			if err := a.sendClone(ctx, taskType, srcID); err != nil {
				return err
			}
			break
		}
		if a.opts.Prior.Intent == nil {
			return conflict("%s: vmid %d already exists", a.what(), a.op.VMID)
		}
		g, _, ok, err := a.waitSettled(ctx, []string{a.op.Node, targetNode}, a.op.VMID, "clone", "create")
		if err != nil {
			return err
		}
		if !ok {
			continue // the earlier clone failed and PVE removed it: check again
		}
		if name != "" && guestName(g) != name {
			return conflict("%s: vmid %d exists as %q, not as the clone %q this operation sends", a.what(), a.op.VMID, guestName(g), name)
		}
		a.out.AlreadyDone = true
		break
	}
	if values := cloneWriteValues(a.op.Values); len(values) > 0 || len(a.op.Delete) > 0 {
		g, node, ok, err := a.waitSettled(ctx, []string{targetNode, a.op.Node}, a.op.VMID, "clone", "create")
		if err != nil {
			return err
		}
		if !ok {
			return conflict("%s: the clone %d disappeared", a.what(), a.op.VMID)
		}
		if drive, ok := cloudInitDrive(g); ok {
			var kept []string
			values, kept = dropCloudInitDrives(values)
			if len(kept) > 0 {
				a.out.Message = joinMessage(a.out.Message, fmt.Sprintf("kept the inherited cloud-init drive %s (not rewritten by %s)", drive, strings.Join(kept, ", ")))
			}
		}
		applied, err := a.applied(ctx, g, values)
		if err != nil {
			return err
		}
		if !applied {
			if err := a.writeConfig(ctx, node, g.Digest, values); err != nil {
				return err
			}
			a.out.AlreadyDone = false
		}
		targetNode = node
	}
	return a.finishGuest(ctx, targetNode, a.op.VMID)
}

// sendClone submits the clone request itself (journaled) and waits for its task.
func (a *applier) sendClone(ctx context.Context, taskType, srcID string) error {
	body := map[string]string{"newid": a.vmid()}
	for _, p := range a.op.Params {
		switch p.Key {
		case "newid", "start":
			continue // a clone is never started in the clone request (PVE refuses start)
		case "name":
			if a.op.GuestType == inventory.LXC {
				body["hostname"] = p.Value
				continue
			}
		}
		body[p.Key] = p.Value
	}
	if _, ok := body["full"]; !ok {
		body["full"] = "1"
	}
	u, ok, err := a.submit(ctx, Intent{TaskType: taskType, Node: a.op.Node, ID: srcID, VMID: a.op.VMID},
		http.MethodPost, "/nodes/{node}/"+a.typ()+"/{vmid}/clone", []string{a.op.Node, srcID}, nil, body)
	if err != nil {
		return failed(err, "%s from %s", a.what(), srcID)
	}
	if ok {
		return a.wait(ctx, u)
	}
	return nil
}

// guestName is a guest's name (qemu) or hostname (lxc).
func guestName(g inventory.Guest) string {
	if g.Type == inventory.LXC {
		v, _ := effective(g, "hostname")
		return v
	}
	v, _ := effective(g, "name")
	return v
}

// cloneWriteValues are the values of a post-clone write: start is a create parameter, never a config key
// (power-on is its own operation).
func cloneWriteValues(values []plan.KV) []plan.KV {
	return slices.DeleteFunc(slices.Clone(values), func(kv plan.KV) bool { return kv.Key == "start" })
}

var (
	// reCloudInitCreate is the create form of a cloud-init drive: <storage>:cloudinit[,options].
	reCloudInitCreate = regexp.MustCompile(`^(?:file=)?[A-Za-z][A-Za-z0-9\-_.]*:cloudinit(?:,|$)`)
	// reCloudInitVolume is an allocated cloud-init volume: …vm-<vmid>-cloudinit[.qcow2|.raw].
	reCloudInitVolume = regexp.MustCompile(`(?:^|[:/=])vm-\d+-cloudinit(?:\.(?:qcow2|raw))?(?:,|$)`)
)

// cloudInitDrive returns the key of a guest's cloud-init drive, if it has one.
func cloudInitDrive(g inventory.Guest) (string, bool) {
	for _, e := range g.Config {
		if v, ok := effective(g, e.Key); ok && reCloudInitVolume.MatchString(v) {
			return e.Key, true
		}
	}
	return "", false
}

// dropCloudInitDrives removes the values that would create a cloud-init drive: a clone inherits its
// template's drive, and writing the create form over it (or next to it) fails or reallocates it.
func dropCloudInitDrives(values []plan.KV) (kept []plan.KV, dropped []string) {
	for _, kv := range values {
		if reCloudInitCreate.MatchString(kv.Value) || reCloudInitVolume.MatchString(kv.Value) {
			dropped = append(dropped, kv.Key)
			continue
		}
		kept = append(kept, kv)
	}
	return kept, dropped
}

func joinMessage(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

// disjoint refuses an operation that sets and deletes the same key (PVE answers 400).
func disjoint(op plan.Operation) error {
	for _, kv := range op.Values {
		if slices.Contains(op.Delete, kv.Key) {
			return terminal("%s %s %d: key %q is both set and deleted", op.Action, op.GuestType, op.VMID, kv.Key)
		}
	}
	return nil
}

// configure writes config keys (and claim-tag the tags) with the precondition's digest or, for a later
// write of a guest's sequence, after checking the expected values against a fresh read.
func (a *applier) configure(ctx context.Context) error {
	if err := disjoint(a.op); err != nil {
		return err
	}
	if len(a.op.Values) == 0 && len(a.op.Delete) == 0 {
		return terminal("%s: nothing to write", a.what())
	}
	g, err := a.readOwned(ctx)
	if err != nil {
		return err
	}
	pre := a.op.Precondition
	if pre.Fingerprint != "" && inventory.Fingerprint(g) != pre.Fingerprint {
		return conflict("%s: the live guest's identity %q is not the recorded %q", a.what(), inventory.Fingerprint(g), pre.Fingerprint)
	}
	applied, err := a.applied(ctx, g, a.op.Values)
	if err != nil {
		return err
	}
	if applied {
		a.out.AlreadyDone = true
		a.out.Fingerprint = inventory.Fingerprint(g)
		return nil
	}
	digest := g.Digest
	switch {
	case len(pre.Expect) > 0:
		for _, kv := range pre.Expect {
			live, _ := effective(g, kv.Key)
			if live != kv.Value {
				return conflict("%s: %s changed since the plan (expected %q, found %q)", a.what(), kv.Key,
					redactValue(kv.Key, kv.Value), live)
			}
		}
	case pre.Digest != "":
		if pre.Digest != g.Digest {
			return conflict("%s: the config changed since it was observed (digest %s, now %s)", a.what(), pre.Digest, g.Digest)
		}
	}
	if err := a.writeConfig(ctx, a.op.Node, digest, a.op.Values); err != nil {
		return err
	}
	if a.op.Action == plan.ActionClaimTag {
		return a.finishGuest(ctx, a.op.Node, a.op.VMID)
	}
	return nil
}

// applied reports whether a guest already holds every value the operation sets and none it deletes (a
// redelivered write whose first delivery succeeded). Values PVE rewrites (MACs added, drives re-printed)
// do not compare equal; the write then meets the digest check instead.
func (a *applier) applied(ctx context.Context, g inventory.Guest, values []plan.KV) (bool, error) {
	for _, k := range a.op.Delete {
		if _, ok := effective(g, k); ok {
			return false, nil
		}
	}
	for _, kv := range values {
		live, ok := effective(g, kv.Key)
		switch {
		case kv.Key == "cipassword" && len(kv.SecretRefs) > 0:
			if !ok || live == "" {
				return false, nil
			}
		case kv.Key == "sshkeys":
			v, err := a.value(ctx, kv)
			if err != nil {
				return false, err
			}
			if !ok || redactValue("sshkeys", v) != live {
				return false, nil
			}
		case kv.Key == "tags":
			if !ok || !pveformat.SameTags(kv.Value, live) {
				return false, nil
			}
		case len(kv.SecretRefs) > 0:
			return false, nil
		default:
			if !ok || live != kv.Value {
				return false, nil
			}
		}
	}
	return true, nil
}

// writeConfig sends values and the operation's deletes: qemu POST …/config (a qmconfig task), lxc PUT
// …/config (synchronous; PVE has no POST there).
func (a *applier) writeConfig(ctx context.Context, node, digest string, values []plan.KV) error {
	body, err := a.values(ctx, values, "vmid", "node", "digest", "delete")
	if err != nil {
		return err
	}
	if len(a.op.Delete) > 0 {
		body["delete"] = strings.Join(a.op.Delete, ",")
	}
	if digest != "" {
		body["digest"] = digest
	}
	method := http.MethodPost
	if a.op.GuestType == inventory.LXC {
		method = http.MethodPut
	}
	u, ok, err := a.send(ctx, method, "/nodes/{node}/"+a.typ()+"/{vmid}/config", []string{node, a.vmid()}, nil, body)
	if err != nil {
		return failed(err, "%s: write config", a.what())
	}
	if ok {
		return a.wait(ctx, u)
	}
	return nil
}

// values builds a request body from KVs, resolving secret references; reserved keys are refused.
func (a *applier) values(ctx context.Context, kvs []plan.KV, reserved ...string) (map[string]string, error) {
	body := make(map[string]string, len(kvs)+2)
	for _, kv := range kvs {
		if slices.Contains(reserved, kv.Key) {
			return nil, terminal("%s: %q cannot be set as a value", a.what(), kv.Key)
		}
		if _, dup := body[kv.Key]; dup {
			return nil, terminal("%s: key %q given twice", a.what(), kv.Key)
		}
		v, err := a.value(ctx, kv)
		if err != nil {
			return nil, err
		}
		body[kv.Key] = v
	}
	return body, nil
}

// value resolves one KV: sshkeys combines its literal (encoded) keys with the referenced keys and
// percent-encodes them as PVE wants; cipassword takes the one referenced secret. A reference under any key
// other than plan.SecretKeys is refused.
func (a *applier) value(ctx context.Context, kv plan.KV) (string, error) {
	if len(kv.SecretRefs) == 0 {
		return kv.Value, nil
	}
	if !plan.MayReferToSecret(kv.Key) {
		// A secret written under another key (description, say) would be shown to anyone who reads the config.
		return "", terminal("%s: refused: %s refers to a secret; only %s may", a.what(), kv.Key, strings.Join(plan.SecretKeys, " and "))
	}
	if a.opts.Secrets == nil {
		return "", terminal("%s: %s refers to secrets, but no secrets store is configured", a.what(), kv.Key)
	}
	resolved := make([]string, 0, len(kv.SecretRefs))
	for _, ref := range kv.SecretRefs {
		v, err := a.opts.Secrets.Resolve(ctx, ref)
		if err != nil {
			// The error names the reference, never the value.
			return "", terminal("%s: %s: resolve %s: %v", a.what(), kv.Key, ref, err)
		}
		resolved = append(resolved, v)
	}
	if kv.Key == "sshkeys" {
		var keys []string
		if kv.Value != "" {
			lit, err := inventory.DecodeSSHKeys(kv.Value)
			if err != nil {
				return "", terminal("%s: sshkeys: %v", a.what(), err)
			}
			keys = append(keys, lit...)
		}
		for _, v := range resolved {
			for line := range strings.SplitSeq(v, "\n") {
				if line = strings.TrimSpace(line); line != "" && !slices.Contains(keys, line) {
					keys = append(keys, line)
				}
			}
		}
		return pveformat.EncodeSSHKeys(keys), nil
	}
	if len(resolved) != 1 || kv.Value != "" {
		return "", terminal("%s: %s takes exactly one secret reference", a.what(), kv.Key)
	}
	return resolved[0], nil
}

// resize grows a disk in place (PUT …/resize, a resize task). Only absolute sizes are accepted: a relative
// "+10G" would grow again on redelivery. A disk already at or above the size is done.
func (a *applier) resize(ctx context.Context) error {
	disk, _ := a.op.Param("disk")
	size, _ := a.op.Param("size")
	if disk == "" || size == "" {
		return terminal("%s: resize needs disk and size", a.what())
	}
	if strings.HasPrefix(size, "+") {
		return terminal("%s: resize needs an absolute size, not %q", a.what(), size)
	}
	want, err := pveformat.ParseSize(size)
	if err != nil {
		return terminal("%s: %v", a.what(), err)
	}
	g, err := a.readOwned(ctx)
	if err != nil {
		return err
	}
	cur, ok := effective(g, disk)
	if !ok {
		return conflict("%s: disk %s does not exist", a.what(), disk)
	}
	if s, ok := pveformat.ParseProps(cur, "").Get("size"); ok {
		have, err := pveformat.ParseSize(s)
		if err == nil && have >= want {
			a.out.AlreadyDone = true
			return nil
		}
	}
	body := map[string]string{"disk": disk, "size": size, "digest": g.Digest}
	u, ok, err := a.send(ctx, http.MethodPut, "/nodes/{node}/"+a.typ()+"/{vmid}/resize", []string{a.op.Node, a.vmid()}, nil, body)
	if err != nil {
		if strings.Contains(messageOf(err), "disk is already at specified size") {
			a.out.AlreadyDone = true
			return nil
		}
		return failed(err, "%s", a.what())
	}
	if ok {
		return a.wait(ctx, u)
	}
	return nil
}

// power is start, shutdown (graceful with timeout; forceStop makes PVE stop the guest when it times
// out), stop and resume. Answers that mean the guest is already there count as done.
func (a *applier) power(ctx context.Context) error {
	verb := map[plan.Action]string{plan.ActionStart: "start", plan.ActionShutdown: "shutdown",
		plan.ActionStop: "stop", plan.ActionResume: "resume"}[a.op.Action]
	body := map[string]string{}
	if a.op.Action == plan.ActionShutdown {
		body["timeout"] = "60"
		body["forceStop"] = "1"
		for _, p := range a.op.Params {
			switch p.Key {
			case "timeout", "forceStop":
				body[p.Key] = p.Value
			default:
				return terminal("%s: unknown parameter %q", a.what(), p.Key)
			}
		}
	}
	if a.opts.Ownership != nil {
		if _, err := a.readOwned(ctx); err != nil {
			return err
		}
	}
	u, ok, err := a.send(ctx, http.MethodPost, "/nodes/{node}/"+a.typ()+"/{vmid}/status/"+verb, []string{a.op.Node, a.vmid()}, nil, body)
	if err == nil && ok {
		err = a.wait(ctx, u)
	}
	if err == nil && ok {
		return a.waitHAPower(ctx, u)
	}
	if err == nil {
		return nil
	}
	msg := messageOf(err)
	done := false
	switch a.op.Action {
	case plan.ActionStart:
		done = strings.Contains(msg, "already running")
	case plan.ActionShutdown, plan.ActionStop:
		done = strings.Contains(msg, "not running")
	default:
		// Only a power change can find its work already done.
	}
	if done {
		a.out.AlreadyDone = true
		a.out.Message = strings.TrimSpace(msg)
		return nil
	}
	return failed(err, "%s", a.what())
}

// markTemplate converts a guest into a template. qemu POST …/template sets `template: 1` at once and renames
// the disks to base volumes in a qmtemplate task; lxc answers null and converts in a background vztemplate
// task, so the adapter finds that task in the node's task list (or, failing that, polls the config for
// `template: 1`). A conversion still running from an earlier delivery is waited for first, so a redelivered
// mark-template never sends a second request: a guest already marked is done.
func (a *applier) markTemplate(ctx context.Context) error {
	taskType := map[string]string{"qemu": "qmtemplate", "lxc": "vztemplate"}[a.typ()]
	if err := a.waitRunning(ctx, taskType); err != nil {
		return err
	}
	g, err := a.readOwned(ctx)
	if err != nil {
		return err
	}
	if g.Template {
		a.out.AlreadyDone = true
		return nil
	}
	sent := a.opts.Now()
	u, ok, err := a.send(ctx, http.MethodPost, "/nodes/{node}/"+a.typ()+"/{vmid}/template", []string{a.op.Node, a.vmid()}, nil, nil)
	if err == nil && ok {
		err = a.wait(ctx, u)
	}
	if err != nil {
		if strings.Contains(messageOf(err), "convert a template to a template") {
			a.out.AlreadyDone = true
			return nil
		}
		return failed(err, "%s", a.what())
	}
	if ok {
		return nil
	}
	// The null answer of lxc: the conversion runs in the background.
	tasks, err := a.c.FindTasks(ctx, TaskQuery{Node: a.op.Node, Type: taskType, ID: a.vmid(), Since: sent.Add(-taskClockSkew)})
	if err != nil {
		return failed(err, "%s: find the conversion task", a.what())
	}
	if len(tasks) > 0 {
		if err := a.wait(ctx, tasks[0].UPID); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithTimeout(ctx, a.c.cfg.TaskTimeout)
	defer cancel()
	delay := a.c.cfg.TaskPollMin
	for {
		g, err := a.readGuest(ctx, a.op.Node, a.op.VMID)
		if err != nil {
			return err
		}
		if g.Template {
			return nil
		}
		if a.opts.Progress != nil {
			a.opts.Progress(TaskStatus{Running: true})
		}
		if err := clock.Sleep(ctx, delay); err != nil {
			return failed(err, "%s: wait for template: 1", a.what())
		}
		delay = min(delay*3/2, a.c.cfg.TaskPollMax)
	}
}

// taskClockSkew is how far a node's task start times may be off the executor's clock.
const taskClockSkew = 10 * time.Minute

// waitRunning waits for the running tasks of a type this principal started on the operation's guest.
// Their outcome is not reported: the caller reads the guest afterwards.
func (a *applier) waitRunning(ctx context.Context, taskType string) error {
	tasks, err := a.c.FindTasks(ctx, TaskQuery{Node: a.op.Node, Type: taskType, ID: a.vmid()})
	if err != nil {
		return failed(err, "%s: list running tasks", a.what())
	}
	for _, t := range tasks {
		if !t.Running {
			continue
		}
		if _, err := a.c.WaitTask(ctx, t.UPID, a.opts.Progress); err != nil && ctx.Err() != nil {
			return failed(ctx.Err(), "%s: wait for task %s", a.what(), t.UPID)
		}
	}
	return nil
}

// download fetches an artifact with POST /nodes/{node}/storage/{storage}/download-url (a download task),
// with checksum and checksum-algorithm when the operation gives them. PVE never overwrites an existing file:
// with a checksum it reuses a matching one and fails on a different one, without one it refuses. So:
//
//   - a file that an earlier delivery of this operation downloaded (its task, recorded or found in the node's
//     task list, succeeded) is done;
//   - a file present with a checksum given is verified by PVE: the request is sent, PVE compares the file
//     with the checksum without downloading, and a match is reported as already done, a mismatch as failed;
//   - a file present without a checksum cannot be verified: if the plan expected it absent, that is a
//     conflict (re-plan: the planner then sees the file, which by name is what it wants); otherwise, as the
//     artifact is then defined by its name alone, it is done.
func (a *applier) download(ctx context.Context) error {
	storage := a.op.Storage
	if s, ok := a.op.Param("storage"); ok && s != "" {
		storage = s
	}
	dl := map[string]string{}
	for _, p := range a.op.Params {
		switch p.Key {
		case "storage":
		case "url", "filename", "content", "checksum", "checksum-algorithm", "verify-certificates", "compression":
			dl[p.Key] = p.Value
		default:
			return terminal("%s: unknown parameter %q", a.what(), p.Key)
		}
	}
	if storage == "" || dl["url"] == "" || dl["filename"] == "" || dl["content"] == "" {
		return terminal("%s: download needs storage, url, filename and content", a.what())
	}
	if (dl["checksum"] == "") != (dl["checksum-algorithm"] == "") {
		return terminal("%s: checksum and checksum-algorithm go together", a.what())
	}
	if strings.ContainsAny(dl["filename"], "/\\") {
		return terminal("%s: file name %q must not contain a path", a.what(), dl["filename"])
	}
	volid := storage + ":" + dl["content"] + "/" + dl["filename"]
	taskID := encodeTaskText(dl["filename"])
	found, priorErr := a.settlePrior(ctx, TaskQuery{Node: a.op.Node, Type: "download", ID: taskID})
	present, err := a.volumePresent(ctx, storage, dl["content"], volid)
	if err != nil {
		return err
	}
	verify := false
	if present {
		switch {
		case found && priorErr == nil:
			a.out.AlreadyDone = true
			a.out.Message = "downloaded by an earlier attempt"
			return nil
		case dl["checksum"] != "":
			verify = true
		case a.op.Precondition.ExpectAbsent:
			return conflict("%s: %s already exists and, without a checksum, cannot be shown to be the same file", a.what(), volid)
		default:
			a.out.AlreadyDone = true
			a.out.Message = volid + " is present (not verified: no checksum given)"
			return nil
		}
	}
	if found && priorErr != nil {
		a.out.Message = "earlier attempt failed: " + messageOf(priorErr)
	}
	u, ok, err := a.submit(ctx, Intent{TaskType: "download", Node: a.op.Node, ID: taskID},
		http.MethodPost, "/nodes/{node}/storage/{storage}/download-url", []string{a.op.Node, storage}, nil, dl)
	if err != nil {
		return failed(err, "%s", a.what())
	}
	if ok {
		if err := a.wait(ctx, u); err != nil {
			return err
		}
	}
	if verify {
		a.out.AlreadyDone = true
		a.out.Message = volid + " is present and matches the checksum"
	}
	return nil
}

// encodeTaskText is PVE::Tools::encode_text, which PVE applies to a task's id (a download's file name):
// every byte outside printable ASCII, and ':', becomes %XX.
func encodeTaskText(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c <= 0x7e && c != ':' {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "%%%02X", c)
	}
	return b.String()
}

func (a *applier) volumePresent(ctx context.Context, storage, content, volid string) (bool, error) {
	raw, err := a.c.get(ctx, "/nodes/{node}/storage/{storage}/content", []string{a.op.Node, storage}, url.Values{"content": {content}})
	if err != nil {
		return false, failed(err, "%s: list storage content", a.what())
	}
	items, err := raw.objects()
	if err != nil {
		return false, failed(err, "%s: list storage content", a.what())
	}
	for _, it := range items {
		if it.str("volid") == volid {
			return true, nil
		}
	}
	return false, nil
}

// delete destroys a guest (prune). It needs the ownership tag and the recorded identity fingerprint, both
// re-verified against a fresh read right before every DELETE; a running guest is stopped first.
func (a *applier) delete(ctx context.Context) error {
	pre := a.op.Precondition
	if !pre.ExpectTag || pre.Fingerprint == "" {
		return terminal("%s: refused: a delete needs the ownership tag and a recorded fingerprint", a.what())
	}
	taskType := map[string]string{"qemu": "qmdestroy", "lxc": "vzdestroy"}[a.typ()]
	if _, err := a.settlePrior(ctx, TaskQuery{Node: a.op.Node, Type: taskType, ID: a.vmid()}); err != nil && ClassOf(err) != plan.ErrorTerminal {
		return err
	}
	for attempt := 0; ; attempt++ {
		g, ok, err := a.c.ReadGuest(ctx, a.op.Node, a.op.GuestType, a.op.VMID)
		if err != nil {
			return failed(err, "%s: read config", a.what())
		}
		if !ok {
			a.out.AlreadyDone = attempt == 0
			return nil
		}
		if err := a.owned(ctx, g); err != nil {
			return err
		}
		if !pveformat.Owned(g.Tags) {
			return conflict("%s: refused: the live guest does not carry the %s tag", a.what(), pveformat.OwnershipTag)
		}
		if fp := inventory.Fingerprint(g); fp != pre.Fingerprint {
			return conflict("%s: refused: the live guest's identity %q is not the recorded %q", a.what(), fp, pre.Fingerprint)
		}
		u, ok, err := a.submit(ctx, Intent{TaskType: taskType, Node: a.op.Node, ID: a.vmid(), VMID: a.op.VMID},
			http.MethodDelete, "/nodes/{node}/"+a.typ()+"/{vmid}", []string{a.op.Node, a.vmid()}, url.Values{"purge": {"1"}}, nil)
		if err != nil {
			msg := messageOf(err)
			if attempt == 0 && (strings.Contains(msg, "is running") || strings.Contains(msg, "container is running")) {
				if err := a.stop(ctx); err != nil {
					return err
				}
				continue
			}
			return failed(err, "%s", a.what())
		}
		if ok {
			return a.wait(ctx, u)
		}
		return nil
	}
}

// stop hard-stops a guest before it is destroyed.
func (a *applier) stop(ctx context.Context) error {
	u, ok, err := a.send(ctx, http.MethodPost, "/nodes/{node}/"+a.typ()+"/{vmid}/status/stop", []string{a.op.Node, a.vmid()}, nil, map[string]string{})
	if err == nil && ok {
		err = a.wait(ctx, u)
	}
	if err != nil && !strings.Contains(messageOf(err), "not running") {
		return failed(err, "%s: stop first", a.what())
	}
	return nil
}
