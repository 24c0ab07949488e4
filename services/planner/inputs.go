package planner

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/proxops/proxops/internal/bus"
	"github.com/proxops/proxops/internal/event"
	"github.com/proxops/proxops/internal/secrets"
	"github.com/proxops/proxops/internal/wire"
)

// A plan rejected for a permanent cause (refused credentials, TLS verification, validation) is not planned
// again by a trigger nobody waits on (poll, webhook, drift) for the same tree: the outcome would be the same.
// It is planned again when something changes: another tree, the inputs from outside the repository
// (inputsDigest), the executor of a node that refused (it publishes an inventory once it reads PVE again,
// e.g. with rotated credentials), or an operator's request.

// inputsDigest is the digest of a cluster's inputs from outside the repository, for a tree: what the
// embedding process reports (Config.Inputs), else the recipients of the planner's age keys and, with
// LocalSecrets, the content of a host secrets file. It names no secret.
func (p *planner) inputsDigest(ctx context.Context, tree, cluster string) string {
	if p.cfg.Inputs != nil {
		return p.cfg.Inputs(cluster)
	}
	h := sha256.New()
	if keys, err := p.cfg.Keys.AgeKeys(); err != nil {
		fmt.Fprintf(h, "age keys: %v\n", err)
	} else {
		fmt.Fprintf(h, "age keys: %s\n", strings.Join(keys.Recipients(), ","))
	}
	if p.cfg.LocalSecrets {
		if r, err := p.repository(ctx, tree); err == nil {
			if c := r.Cluster(cluster); c != nil && c.Config != nil && c.Config.SecretsFile != "" && secrets.IsHostPath(c.Config.SecretsPath()) {
				fmt.Fprintf(h, "secrets file %s: %s\n", c.Config.SecretsPath(), fileDigest(c.Config.SecretsPath()))
			}
		}
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

// fileDigest is the content digest of a host file (~ expanded), or why it cannot be read.
func fileDigest(path string) string {
	local, err := secrets.ExpandHome(path)
	if err != nil {
		return err.Error()
	}
	f, err := os.Open(local)
	if err != nil {
		return "unreadable: " + err.Error()
	}
	defer func() { _ = f.Close() }()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "unreadable: " + err.Error()
	}
	return hex.EncodeToString(h.Sum(nil))
}

// waitsForChange reports whether an event is one a permanent rejection waits out: a trigger nobody waits on,
// for the commit and tree the cluster's plan was rejected against, while nothing else is wanted or running, and with
// the same inputs from outside the repository. inputs computes the digest (called at most once by the caller).
func waitsForChange(ctl wire.ClusterControl, ev event.RepoChanged, inputs func() string) bool {
	b := ctl.Blocked
	if !b.Waiting() || ev.RequestID != "" || ctl.RunID != "" || ctl.Pending() {
		return false
	}
	// A new commit is a change even when its tree is the same: only the very event planned again waits.
	if ev.Repo != ctl.Want.Repo || ev.Tree != b.Tree || ev.Commit != b.Commit {
		return false
	}
	return inputs() == b.Inputs
}

// changeSince says what changed since a permanent rejection ("" when nothing did): an inventory a refusing
// node's executor published after the plan began, or the inputs from outside the repository.
func (p *planner) changeSince(ctx context.Context, cluster string, b wire.Blocked) (string, error) {
	if len(b.Nodes) > 0 {
		filter, err := bus.InventoryFilter(cluster)
		if err != nil {
			return "", err
		}
		msgs, err := p.bus.LastPerSubject(ctx, bus.StreamInventory, filter)
		if err != nil && !errors.Is(err, bus.ErrNotFound) {
			return "", err
		}
		for _, m := range msgs {
			node := m.Subject[strings.LastIndexByte(m.Subject, '.')+1:]
			if m.Sequence > b.InventorySeq && slices.Contains(b.Nodes, node) {
				return "the executor of node " + node + " reads PVE again", nil
			}
		}
	}
	if d := p.inputsDigest(ctx, b.Tree, cluster); d != b.Inputs {
		return "the inputs from outside the repository changed (secrets file, age keys, configuration or CA file)", nil
	}
	return "", nil
}

// recheck plans a cluster whose permanent rejection waits for a change again once something changed: the
// rejected event is wanted once more (without its request, which the rejection answered).
func (p *planner) recheck(ctx context.Context, cluster string) {
	ctl, rev, err := p.readControl(ctx, cluster)
	if err != nil || !ctl.Blocked.Waiting() || ctl.Pending() || ctl.RunID != "" {
		return
	}
	what, err := p.changeSince(ctx, cluster, ctl.Blocked)
	if err != nil {
		if ctx.Err() == nil {
			p.log.Warn("cannot tell whether a rejected cluster's inputs changed", "cluster", cluster, "err", err)
		}
		return
	}
	if what == "" {
		return
	}
	cause := ctl.Blocked.Reason
	ctl.WantSeq, ctl.Want.RequestID, ctl.WantRequests = ctl.WantSeq+1, "", nil
	ctl.Blocked = wire.Blocked{}
	if _, err := p.writeControl(ctx, ctl, rev); err != nil {
		if !errors.Is(err, bus.ErrRevisionMismatch) && ctx.Err() == nil {
			p.log.Warn("cannot plan a rejected cluster again", "cluster", cluster, "err", err)
		}
		return
	}
	p.log.Info("something changed since the plan was rejected; planning again", "cluster", cluster, "change", what,
		"rejected_for", cause, "commit", ctl.Want.Commit)
	select {
	case p.kick <- cluster:
	default:
	}
}
