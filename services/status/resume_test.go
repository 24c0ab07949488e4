package status_test

import (
	"testing"

	"github.com/proxops/proxops/internal/event"
)

// A service restarted after it folded every message, with nothing new published since, is ready and says
// it has read every stream to its end: a caller waiting for it (proxops up --once after a rejection, when
// the results stream got nothing new) does not wait for a message that never comes.
func TestARestartWithNothingNewIsReadyAndCaughtUp(t *testing.T) {
	t.Parallel()
	sys := startSystem(t)
	p := sys.publisher()
	converge(p, p.repoChanged("3f9a1c2e8b7d6a5f4e3d2c1b0a9f8e7d6c5b4a3f", event.TriggerWebhook))
	before := sys.settle().deterministic()

	sys.restartService() // waits for /readyz
	if got := sys.settle().deterministic(); got != before {
		t.Fatalf("after a restart:\n%s\nwant:\n%s", got, before)
	}
}
