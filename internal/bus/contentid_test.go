package bus_test

import (
	"crypto/sha256"
	"encoding/hex"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/proxops/proxops/internal/bus"
)

// Every published message names its content: the same body gives the same Proxops-Content-Id whoever
// publishes it, another body another id, and a body stored as a blob keeps the id of its content.
func TestPublishedMessagesCarryTheirContentID(t *testing.T) {
	t.Parallel()
	env := startEnv(t, bus.ServerConfig{}, bus.ProvisionConfig{})
	ctx := testContext(t)
	subj, _ := bus.StatusSubject("lab")
	other, _ := bus.StatusSubject("lab2")
	want := func(m proto.Message) string {
		data, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		h := sha256.Sum256(data)
		return "sha256:" + hex.EncodeToString(h[:])
	}
	big := bigValue(t, 2<<20)
	cases := []struct {
		subject string
		msg     proto.Message
	}{
		{subj, wrapperspb.String("converged")},
		{other, wrapperspb.String("converged")},
		{subj, wrapperspb.String("failed")},
		{other, big},
	}
	seen := map[string]string{}
	for _, c := range cases {
		if _, err := env.bus.Publish(ctx, c.subject, c.msg); err != nil {
			t.Fatal(err)
		}
		m, err := env.bus.LastMessage(ctx, bus.StreamStatus, c.subject)
		if err != nil {
			t.Fatal(err)
		}
		if got, w := m.Header.Get(bus.HeaderContentID), want(c.msg); got != w || m.ContentID() != w {
			t.Fatalf("%s: %s = %q, want %q", c.subject, bus.HeaderContentID, got, w)
		}
		seen[m.ContentID()] = c.subject
	}
	if len(seen) != 3 {
		t.Fatalf("want three distinct content ids for three distinct bodies, got %v", seen)
	}
}
