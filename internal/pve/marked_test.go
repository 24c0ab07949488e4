package pve

import (
	"context"
	"errors"
	"testing"

	"github.com/proxops/proxops/internal/plan"
	"github.com/proxops/proxops/internal/pveformat"
)

type recorded map[string]bool

func (r recorded) ObjectRecorded(_ context.Context, kind, id string) (bool, error) {
	if kind == "broken" {
		return false, errors.New("bucket unreachable")
	}
	return r[kind+"/"+id], nil
}

// The ownership and claim checks word each refusal for the object they guard: "the pool's comment" for a
// named kind, "its comment" for a firewall object, and sort it into the class the executor reports.
func TestMarkedObjectRefusalsNameTheObject(t *testing.T) {
	ctx := context.Background()
	pool := markedObject{what: "configure-pool lab", noun: "pool", kind: ObjectKindPool, id: "lab"}
	group := markedObject{what: "configure-firewall-object group web", kind: "group", id: "web"}
	inv := recorded{"pool/lab": true}
	marked := pveformat.MarkComment("web tier")
	pre := plan.Precondition{Expect: []plan.KV{{Key: "comment", Value: "old"}}}
	cases := []struct {
		name string
		err  error
		want string
		cls  plan.ErrorClass
	}{
		{"unmarked pool", pool.owned(ctx, inv, "by hand"), "configure-pool lab: refused: the pool's comment does not carry the [proxops] marker", plan.ErrorTerminal},
		{"unrecorded object", group.owned(ctx, inv, marked), "configure-firewall-object group web: refused: it carries the [proxops] marker, but ProxOps holds no ownership record of it", plan.ErrorTerminal},
		{"unreadable inventory", markedObject{what: "x", kind: "broken"}.owned(ctx, inv, marked), "x: read the ownership record: bucket unreachable", plan.ErrorRetryable},
		{"changed comment", pool.expected("new", pre), `configure-pool lab: the pool's comment is "new", the plan observed "old"`, plan.ErrorConflict},
		{"claim of a changed comment", group.claimable("new", pre), `configure-firewall-object group web: refused: its comment is "new", the plan observed "old"; it is not claimed`, plan.ErrorTerminal},
		{"claim without the observed comment", pool.claimable("old", plan.Precondition{}), "configure-pool lab: refused: a claim must carry the comment the plan observed", plan.ErrorTerminal},
	}
	for _, c := range cases {
		var e *Error
		if !errors.As(c.err, &e) || e.Error() != c.want || e.Class != c.cls {
			t.Errorf("%s: %v (class %v), want %q (class %v)", c.name, c.err, e, c.want, c.cls)
		}
	}
	if err := pool.owned(ctx, inv, marked); err != nil {
		t.Errorf("a marked, recorded pool: %v", err)
	}
	if err := pool.owned(ctx, nil, "by hand"); err != nil {
		t.Errorf("without an inventory nothing is checked: %v", err)
	}
}
