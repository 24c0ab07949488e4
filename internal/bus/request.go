package bus

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"
)

// RemoteError is the error a server-side handler returned, as the requester sees it.
type RemoteError struct {
	Subject string
	Message string
}

func (e *RemoteError) Error() string { return fmt.Sprintf("%s: remote: %s", e.Subject, e.Message) }

// Request sends req on subject and decodes the reply into resp. Without a deadline in ctx it waits
// Options.RequestTimeout. A handler's error comes back as a *RemoteError; no server at all as
// nats.ErrNoResponders.
func (b *Bus) Request(ctx context.Context, subject string, req, resp proto.Message) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, b.opts.RequestTimeout)
		defer cancel()
	}
	msg, blob, err := b.encode(ctx, subject, req)
	if err != nil {
		return fmt.Errorf("request %s: %w", subject, err)
	}
	// The request body is read by the one server that answers; drop it either way once the exchange ends.
	defer b.dropBlob(ctx, blob)
	reply, err := b.nc.RequestMsgWithContext(ctx, msg)
	if err != nil {
		return fmt.Errorf("request %s: %w", subject, err)
	}
	if e := reply.Header.Get(HeaderError); e != "" {
		return &RemoteError{Subject: subject, Message: e}
	}
	err = b.decode(ctx, reply.Header, reply.Data, resp)
	b.dropBlob(ctx, reply.Header.Get(HeaderBlob))
	if err != nil {
		return fmt.Errorf("request %s: reply: %w", subject, err)
	}
	return nil
}

// Request is one request a server-side handler receives.
type Request struct {
	msg *nats.Msg
	bus *Bus
}

// Subject the request was sent to.
func (r *Request) Subject() string { return r.msg.Subject }

// Type is the request's Proxops-Type.
func (r *Request) Type() string { return r.msg.Header.Get(HeaderType) }

// Decode checks the request's type and unmarshals it into into.
func (r *Request) Decode(ctx context.Context, into proto.Message) error {
	if err := r.bus.decode(ctx, r.msg.Header, r.msg.Data, into); err != nil {
		return fmt.Errorf("decode request on %s: %w", r.msg.Subject, err)
	}
	return nil
}

// RequestHandler answers one request: a reply message, or an error the requester receives as a
// *RemoteError.
type RequestHandler func(ctx context.Context, req *Request) (proto.Message, error)

// Service is a running request server.
type Service struct {
	sub    *nats.Subscription
	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once
}

// ServeOptions tune Serve.
type ServeOptions struct {
	// Concurrency is how many requests are answered at once (default 4).
	Concurrency int
	// Timeout bounds one handler call (default 2 min).
	Timeout time.Duration
}

// Serve answers requests on subject in a queue group (every server of the group shares the load) until ctx
// is cancelled or Stop is called.
func (b *Bus) Serve(ctx context.Context, subject, queue string, opts ServeOptions, h RequestHandler) (*Service, error) {
	if opts.Concurrency <= 0 {
		opts.Concurrency = 4
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 2 * time.Minute
	}
	ch := make(chan *nats.Msg, 64*opts.Concurrency)
	sub, err := b.nc.ChanQueueSubscribe(subject, queue, ch)
	if err != nil {
		return nil, fmt.Errorf("serve %s: %w", subject, err)
	}
	// Make sure the server has the subscription before callers send requests.
	if err := b.nc.FlushTimeout(b.opts.APITimeout); err != nil {
		_ = sub.Unsubscribe()
		return nil, fmt.Errorf("serve %s: %w", subject, err)
	}
	sctx, cancel := context.WithCancel(ctx)
	s := &Service{sub: sub, cancel: cancel}
	for range opts.Concurrency {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			for {
				select {
				case <-sctx.Done():
					return
				case msg := <-ch:
					b.answer(sctx, msg, opts.Timeout, h)
				}
			}
		}()
	}
	go func() {
		<-sctx.Done()
		_ = sub.Unsubscribe()
	}()
	return s, nil
}

func (b *Bus) answer(ctx context.Context, msg *nats.Msg, timeout time.Duration, h RequestHandler) {
	if msg.Reply == "" {
		b.log.Warn("request without reply subject", "subject", msg.Subject)
		return
	}
	hctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	reply, err := h(hctx, &Request{msg: msg, bus: b})
	var out *nats.Msg
	if err == nil && reply == nil {
		err = errors.New("handler returned no reply")
	}
	if err == nil {
		var blob string
		out, blob, err = b.encode(hctx, msg.Reply, reply)
		if err == nil {
			if perr := b.nc.PublishMsg(out); perr != nil {
				b.dropBlob(ctx, blob)
				b.log.Warn("reply", "subject", msg.Subject, "err", perr)
			}
			return
		}
	}
	out = nats.NewMsg(msg.Reply)
	out.Header.Set(HeaderError, err.Error())
	if perr := b.nc.PublishMsg(out); perr != nil {
		b.log.Warn("reply", "subject", msg.Subject, "err", perr)
	}
}

// Stop stops taking requests and waits for the handlers in flight.
func (s *Service) Stop() {
	s.once.Do(func() {
		s.cancel()
		_ = s.sub.Unsubscribe()
	})
	s.wg.Wait()
}
