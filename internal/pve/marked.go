package pve

import (
	"context"
	"fmt"
	"slices"

	"github.com/proxops/proxops/internal/plan"
	"github.com/proxops/proxops/internal/pveformat"
)

// markedObject is a cluster-wide object ProxOps owns through the marker in its comment and a record in
// the ownership inventory (a pool, a firewall group, an HA rule, ...), as an applier names it: what is
// the operation and the object, noun the object's kind in a sentence (empty: "it"), kind and id its
// ownership record.
type markedObject struct {
	what, noun string
	kind, id   string
}

// its is whose comment it is: "the pool's", or "its".
func (m markedObject) its() string {
	if m.noun == "" {
		return "its"
	}
	return "the " + m.noun + "'s"
}

// it is the object in a sentence: "the pool", or "it".
func (m markedObject) it() string {
	if m.noun == "" {
		return "it"
	}
	return "the " + m.noun
}

// owned checks, on the object just read (its live comment) and right before a write to it, that ProxOps
// owns it: the marker in the comment and the record in the ownership inventory objects (none: no check).
// A refusal is terminal.
func (m markedObject) owned(ctx context.Context, objects ObjectOwnership, comment string) error {
	if objects == nil {
		return nil
	}
	if !pveformat.Marked(comment) {
		return refused(RefusalNotOwned, "%s: refused: %s comment does not carry the %s marker", m.what, m.its(), pveformat.OwnershipMarker)
	}
	found, err := objects.ObjectRecorded(ctx, m.kind, m.id)
	switch {
	case err != nil:
		return &Error{Class: plan.ErrorRetryable, Err: fmt.Errorf("%s: read the ownership record: %w", m.what, err)}
	case !found:
		return refused(RefusalNotOwned, "%s: refused: %s carries the %s marker, but ProxOps holds no ownership record of it",
			m.what, m.it(), pveformat.OwnershipMarker)
	}
	return nil
}

// expected checks the live comment against the one the plan observed (marker included), when the
// precondition carries one: another is a conflict.
func (m markedObject) expected(comment string, pre plan.Precondition) error {
	if want, ok := observedComment(pre); ok && want != comment {
		return conflict("%s: %s comment is %q, the plan observed %q", m.what, m.its(), comment, want)
	}
	return nil
}

// claimable refuses a claim of the object while its live comment is not the one the plan observed, or when
// the operation does not carry that comment.
func (m markedObject) claimable(comment string, pre plan.Precondition) error {
	observed, ok := observedComment(pre)
	switch {
	case !ok:
		return refused(RefusalClaimMismatch, "%s: refused: a claim must carry the comment the plan observed", m.what)
	case comment != observed:
		return refused(RefusalClaimMismatch, "%s: refused: %s comment is %q, the plan observed %q; it is not claimed",
			m.what, m.its(), comment, observed)
	}
	return nil
}

// comment is the comment an operation on a marked object writes: its comment parameter with the
// ownership marker.
func (a *applier) comment() string {
	text, _ := a.op.Param("comment")
	return pveformat.MarkComment(text)
}

// observedComment is the comment the plan observed on an object, which its operation's precondition
// carries; ok is false when it carries none.
func observedComment(pre plan.Precondition) (comment string, ok bool) {
	i := slices.IndexFunc(pre.Expect, func(kv plan.KV) bool { return kv.Key == "comment" })
	if i < 0 {
		return "", false
	}
	return pre.Expect[i].Value, true
}
