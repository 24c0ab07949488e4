package pvesim

import (
	"os"
	"regexp"
	"sort"
	"testing"
)

// Every path and method the embedded schema lists has a handler and vice versa, and the generator's
// list names exactly those.
func TestServedPathsMatchSchema(t *testing.T) {
	s := testSim(t)
	var fromSchema []string
	for _, p := range s.api.Paths() {
		for _, m := range s.api.Methods(p) {
			fromSchema = append(fromSchema, m+" "+p)
		}
	}
	var fromHandlers []string
	for k := range handlers {
		fromHandlers = append(fromHandlers, k)
	}
	sort.Strings(fromSchema)
	sort.Strings(fromHandlers)
	if len(fromSchema) != len(fromHandlers) {
		t.Fatalf("schema serves %v\nhandlers serve %v", fromSchema, fromHandlers)
	}
	for i := range fromSchema {
		if fromSchema[i] != fromHandlers[i] {
			t.Fatalf("schema %q vs handler %q", fromSchema[i], fromHandlers[i])
		}
	}
	gen, err := os.ReadFile("schema/gen/main.go")
	if err != nil {
		t.Fatal(err)
	}
	n := len(regexp.MustCompile(`"(GET|POST|PUT|DELETE)"`).FindAll(gen, -1))
	if n != len(fromSchema) {
		t.Fatalf("generator lists %d methods, schema has %d", n, len(fromSchema))
	}
}
