package watcher

import (
	"strings"
	"testing"
)

const fuzzSHA = "9fceb02d0ae598e95dc970b74767f19372d61af8"

// checkPushEvent holds for every payload a parser accepts.
func checkPushEvent(t *testing.T, ev pushEvent) {
	t.Helper()
	if !strings.HasPrefix(ev.Ref, "refs/") {
		t.Fatalf("accepted ref %q", ev.Ref)
	}
	if !isObjectID(ev.After) || strings.ToLower(ev.After) != ev.After {
		t.Fatalf("accepted after %q", ev.After)
	}
	if strings.Trim(ev.After, "0") == "" && !ev.Deleted {
		t.Fatalf("a zero after %q is not a deletion", ev.After)
	}
}

func FuzzParseGitHubPush(f *testing.F) {
	f.Add([]byte(`{"ref":"refs/heads/main","before":"0000000000000000000000000000000000000000","after":"` + fuzzSHA + `","created":true,"deleted":false,"repository":{"full_name":"ops/infra"},"commits":[{"id":"` + fuzzSHA + `"}]}`))
	f.Add([]byte(`{"ref":"refs/heads/old","after":"0000000000000000000000000000000000000000","deleted":true}`))
	f.Add([]byte(`{"zen":"Keep it logically awesome.","hook_id":1}`))
	f.Add([]byte(`{"ref":1}`))
	f.Add([]byte(``))
	f.Fuzz(func(t *testing.T, body []byte) {
		ev, err := parseGitHubPush(body)
		if err == nil {
			checkPushEvent(t, ev)
		}
	})
}

func FuzzParseGiteaPush(f *testing.F) {
	f.Add([]byte(`{"secret":"","ref":"refs/heads/main","before":"` + fuzzSHA + `","after":"` + fuzzSHA + `","compare_url":"","commits":[],"total_commits":1,"repository":{"full_name":"ops/infra"},"pusher":{"login":"a"},"sender":{"login":"a"}}`))
	f.Add([]byte(`{"ref":"refs/heads/main","after":"` + strings.Repeat("a", 64) + `"}`))
	f.Add([]byte(`{"ref":"main","after":"` + fuzzSHA + `"}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, body []byte) {
		ev, err := parseGiteaPush(body)
		if err == nil {
			checkPushEvent(t, ev)
		}
	})
}

func FuzzParseGitLabPush(f *testing.F) {
	f.Add([]byte(`{"object_kind":"push","event_name":"push","before":"` + fuzzSHA + `","after":"` + fuzzSHA + `","ref":"refs/heads/main","checkout_sha":"` + fuzzSHA + `","project":{"path_with_namespace":"ops/infra"},"commits":[],"total_commits_count":0}`))
	f.Add([]byte(`{"object_kind":"tag_push","ref":"refs/tags/v1","after":"` + fuzzSHA + `"}`))
	f.Add([]byte(`{"object_kind":"push","ref":"refs/heads/gone","after":"0000000000000000000000000000000000000000","checkout_sha":null}`))
	f.Add([]byte(`{"object_kind":null}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		ev, err := parseGitLabPush(body)
		if err == nil {
			checkPushEvent(t, ev)
		}
	})
}
