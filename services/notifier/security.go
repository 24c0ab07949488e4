package notifier

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/proxops/proxops/internal/bus"
	"github.com/proxops/proxops/internal/inventory"
	"github.com/proxops/proxops/internal/repo"
	"github.com/proxops/proxops/internal/wire"
)

// The adopter's gap report of a cluster lists every live setting that weakens a guest's isolation from its
// host. The notifier follows those reports through a second durable consumer and tells the warnings that
// were not in the cluster's previous report; one that goes away and comes back is told again.

// securityKey is the key of a cluster's told security warnings in proxops_notify. Cluster names have no
// dot, so it never meets a cluster's plan-event state (key = the cluster).
func securityKey(cluster string) string { return cluster + ".security" }

// securityState is what the notifier last told of a cluster's security warnings.
type securityState struct {
	// Seq is the PROXOPS_GAPS sequence last folded in; Prev the warnings before it, so a redelivered report
	// gives the same notification as its first delivery.
	Seq      uint64   `json:"seq"`
	Warnings []string `json:"warnings,omitempty"`
	Prev     []string `json:"prev,omitempty"`
}

// securityLine is a security warning as a notification tells it.
func securityLine(w inventory.SecurityWarning) string {
	who := w.Kind + "/" + w.Name
	if w.Name == "" {
		who = "guest " + strconv.Itoa(w.VMID)
	}
	return fmt.Sprintf("%s (vmid %d on %s) %s: %s (%s)", who, w.VMID, w.Node, w.Key, w.Value, w.Why)
}

// foldSecurity returns the notification for the warnings of report that were not told before, and the
// warnings to remember. It is a pure function of its inputs.
func foldSecurity(before []string, report inventory.GapReport, id string, at time.Time, statusURL func(string) string) ([]Notification, []string) {
	var now []string
	for _, w := range report.Security {
		now = append(now, securityLine(w))
	}
	slices.Sort(now)
	now = slices.Compact(now)
	var fresh []string
	for _, w := range now {
		if _, found := slices.BinarySearch(before, w); !found {
			fresh = append(fresh, w)
		}
	}
	if len(fresh) == 0 {
		return nil, now
	}
	return []Notification{{ID: id + "." + repo.NotifySecurityWarning, Event: repo.NotifySecurityWarning, Cluster: report.Cluster,
		Severity: "warning", Details: fresh, URL: statusURL(report.Cluster), At: at,
		Title: fmt.Sprintf("ProxOps: %d new security %s on cluster %s: live settings weaken a guest's isolation from its host",
			len(fresh), plural(len(fresh), "warning"), report.Cluster)}}, now
}

// handleGaps notifies the new security warnings of one gap report.
func (n *notifier) handleGaps(ctx context.Context, d *bus.Delivery) error {
	report, err := wire.DecodeGapReport(ctx, d.Decode)
	if err != nil {
		n.log.Error("gap report cannot be decoded; not notified", "subject", d.Subject(), "stream_seq", d.StreamSequence(), "err", err)
		return bus.Terminal(err)
	}
	if report.Cluster == "" {
		return nil
	}
	seq := d.StreamSequence()
	st, err := n.loadSecurity(ctx, report.Cluster)
	if err != nil {
		return err
	}
	before := st.Warnings
	if st.Seq == seq {
		// A redelivery of the report last folded in: tell what its first delivery told.
		before = st.Prev
	}
	id := d.Header().Get("Nats-Msg-Id")
	if id == "" {
		id = fmt.Sprintf("%s-%d", bus.StreamGaps, seq)
	}
	notes, after := foldSecurity(before, report, id, d.Timestamp(), n.statusURL)
	if st.Seq < seq {
		if err := n.storeSecurity(ctx, report.Cluster, securityState{Seq: seq, Warnings: after, Prev: before}); err != nil {
			return err
		}
	}
	return n.tell(ctx, d, report.Cluster, notes)
}

func (n *notifier) loadSecurity(ctx context.Context, cluster string) (securityState, error) {
	var st securityState
	if err := n.recall(ctx, securityKey(cluster), &st); err != nil {
		return securityState{}, fmt.Errorf("notifier security state of %s: %w", cluster, err)
	}
	return st, nil
}

func (n *notifier) storeSecurity(ctx context.Context, cluster string, st securityState) error {
	if err := n.remember(ctx, securityKey(cluster), st); err != nil {
		return fmt.Errorf("notifier security state of %s: %w", cluster, err)
	}
	return nil
}
