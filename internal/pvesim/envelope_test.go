package pvesim

import (
	"bytes"
	"encoding/json"
	"testing"
)

// mapJSON renders v the way a map of its members is rendered: keys sorted, no HTML escaping.
func mapJSON(t *testing.T, v any) string {
	t.Helper()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	return string(bytes.TrimRight(buf.Bytes(), "\n"))
}

// An answer is written with its members in the order of their names, absent ones left out: byte for byte
// what rendering them from a map gives.
func TestAnswersAreWrittenWithTheirMembersInNameOrder(t *testing.T) {
	items := []pendingItem{{Key: "cores", Value: "2", Pending: "4"}, {Key: "net0", Delete: 2}, {Key: "name", Value: ""}, {Key: "x<y&z"}}
	itemMaps := []map[string]any{{"key": "cores", "value": "2", "pending": "4"}, {"key": "net0", "delete": 2}, {"key": "name", "value": ""}, {"key": "x<y&z"}}
	for _, c := range []struct {
		name   string
		status int
		data   any
		err    *apiError
		total  int
		want   map[string]any
	}{
		{"data", 200, "UPID:pve1:1:2:3:qmcreate:100:root@pam:", nil, 0, map[string]any{"data": "UPID:pve1:1:2:3:qmcreate:100:root@pam:"}},
		{"null", 200, nil, nil, 0, map[string]any{"data": nil}},
		{"total", 200, []int{1, 2}, nil, 2, map[string]any{"data": []int{1, 2}, "total": 2}},
		{"pending", 200, items, nil, 0, map[string]any{"data": itemMaps}},
		{"error", 500, "ignored", &apiError{status: 500, msg: "VM 100 is locked (create)\n"}, 0,
			map[string]any{"data": nil, "message": "VM 100 is locked (create)\n"}},
		{"bare error", 501, nil, &apiError{status: 501}, 0, map[string]any{"data": nil, "message": "Not Implemented"}},
		{"parameter errors", 400, nil, &apiError{status: 400, msg: "Parameter verification failed.", errors: map[string]string{"b": "x", "a": "y"}}, 0,
			map[string]any{"data": nil, "message": "Parameter verification failed.", "errors": map[string]string{"b": "x", "a": "y"}}},
	} {
		got, _ := envelope(c.status, c.data, c.err, c.total)
		if want := mapJSON(t, c.want); string(got) != want {
			t.Errorf("%s: %s, want %s", c.name, got, want)
		}
	}
}
