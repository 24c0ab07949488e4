package pipeline_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/proxops/proxops/internal/plan"
	"github.com/proxops/proxops/internal/pvesim"
)

// BenchmarkApply200CreatesOver4Nodes measures one apply of 200 new VMs spread over 4 nodes, each create a
// 500 ms task, executors running 4 operations per node (quality.md P4): from the repository event to the
// run's end. floor-s is the time the task durations alone need, 200 / (4·4) · 0.5 s; wall/floor must stay
// at or below 1.25.
func BenchmarkApply200CreatesOver4Nodes(b *testing.B) {
	const (
		guests  = 200
		nodes   = 4
		perNode = 4
		task    = 500 * time.Millisecond
	)
	floor := time.Duration(float64(guests) / float64(nodes*perNode) * float64(task))
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		wall := benchApply(b, guests, nodes, task)
		b.ReportMetric(wall.Seconds(), "wall-s")
		b.ReportMetric(floor.Seconds(), "floor-s")
		b.ReportMetric(wall.Seconds()/floor.Seconds(), "wall/floor")
	}
}

func benchApply(b *testing.B, guests, nodes int, task time.Duration) time.Duration {
	spec := pvesim.DefaultSpec()
	spec.Nodes = nil
	for n := 1; n <= nodes; n++ {
		spec.Nodes = append(spec.Nodes, pvesim.NodeSpec{Name: fmt.Sprintf("pve%d", n)})
	}
	spec.TaskDurations = map[string]pvesim.Duration{"default": pvesim.Duration(5 * time.Millisecond),
		"qmcreate": pvesim.Duration(task)}
	e := newEnv(b, spec)
	var names []string
	for n := 1; n <= nodes; n++ {
		names = append(names, fmt.Sprintf("pve%d", n))
	}
	e.startExecutors(names...)
	e.startPlanner(e.plannerConfig("bench"))
	files := repoFiles{"clusters/lab/config.yaml": fmt.Sprintf("pve:\n  clusters:\n    lab:\n      base-url: %s\n      nodes: [%s]\n",
		e.srv.URL, strings.Join(names, ", "))}
	var list []string
	for i := range guests {
		name := fmt.Sprintf("g-%03d", i)
		files["vm/lab/"+name+".yaml"] = vm(name, 1000+i, names[i%nodes])
		list = append(list, "  - ../../vm/lab/"+name+".yaml")
	}
	files["clusters/lab/resources.yaml"] = "resources:\n" + strings.Join(list, "\n") + "\n"
	start := time.Now()
	b.StartTimer()
	ev := e.announce(files, false)
	o := e.wait(ev, 5*time.Minute)
	wall := time.Since(start)
	b.StopTimer()
	if f := o.last(); f.Outcome != plan.OutcomeSucceeded || f.Succeeded != guests {
		b.Fatalf("run: %s, %d succeeded", f.Outcome, f.Succeeded)
	}
	return wall
}
