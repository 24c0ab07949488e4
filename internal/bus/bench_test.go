package bus_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/proxops/proxops/internal/bus"
)

// opsPerIteration keeps the figures meaningful under -benchtime 1x.
const opsPerIteration = 400

// fsyncRate measures this disk's synced small writes per second in dir: the floor SyncAlways works against.
func fsyncRate(b *testing.B, dir string) float64 {
	b.Helper()
	f, err := os.Create(filepath.Join(dir, "fsync-probe"))
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	buf := make([]byte, 512)
	const n = 200
	start := time.Now()
	for range n {
		if _, err := f.Write(buf); err != nil {
			b.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			b.Fatal(err)
		}
	}
	return n / time.Since(start).Seconds()
}

// BenchmarkOperationThroughput publishes operations to a node's work queue and has a consumer decode and
// acknowledge them, through the bus helpers, with and without SyncAlways. It reports operations per second
// and, measured in the same run on the same disk, the fsync floor.
func BenchmarkOperationThroughput(b *testing.B) {
	for _, mode := range []struct {
		name string
		sync bool
	}{{"sync-always", true}, {"default-sync", false}} {
		b.Run(mode.name, func(b *testing.B) {
			dir := b.TempDir()
			floor := fsyncRate(b, dir)
			env := startEnv(b, bus.ServerConfig{Dir: filepath.Join(dir, "nats"), SyncAlways: mode.sync}, bus.ProvisionConfig{})
			subject, _ := bus.OpSubject("lab", "pve1")
			durable, _ := bus.ExecutorConsumer("lab", "pve1")
			ctx := context.Background()
			if err := env.bus.EnsureConsumer(ctx, bus.ConsumerConfig{Stream: bus.StreamOps, Durable: durable, Filter: subject}); err != nil {
				b.Fatal(err)
			}
			var acked atomic.Int64
			cctx, stop := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() {
				done <- env.bus.Consume(cctx, bus.StreamOps, durable, bus.ConsumeOptions{Concurrency: 16, MaxWait: time.Second}, func(ctx context.Context, d *bus.Delivery) error {
					var v wrapperspb.StringValue
					if err := d.Decode(ctx, &v); err != nil {
						return bus.Terminal(err)
					}
					if err := d.Ack(ctx); err != nil {
						return err
					}
					acked.Add(1)
					return nil
				})
			}()
			total := int64(b.N * opsPerIteration)
			const publishers = 8
			b.ResetTimer()
			start := time.Now()
			var wg sync.WaitGroup
			var next atomic.Int64
			for range publishers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						i := next.Add(1)
						if i > total {
							return
						}
						if _, err := env.bus.Publish(ctx, subject, wrapperspb.String("op"), bus.WithMsgID(fmt.Sprintf("run.op-%d", i))); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			for acked.Load() < total {
				if time.Since(start) > 2*time.Minute {
					b.Fatalf("only %d of %d operations acknowledged", acked.Load(), total)
				}
				time.Sleep(time.Millisecond)
			}
			elapsed := time.Since(start)
			b.StopTimer()
			stop()
			if err := <-done; err != nil {
				b.Fatal(err)
			}
			opsPerSec := float64(total) / elapsed.Seconds()
			b.ReportMetric(opsPerSec, "ops/s")
			b.ReportMetric(floor, "fsyncs/s")
			b.ReportMetric(opsPerSec/floor, "ops/fsync")
		})
	}
}
