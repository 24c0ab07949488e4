package bus

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/proxops/proxops/internal/defaults"
)

// ConsumerConfig describes a durable pull consumer with explicit acknowledgement.
type ConsumerConfig struct {
	Stream  string
	Durable string
	// Filter is the one subject (or wildcard) the consumer reads.
	Filter string
	// AckWait is how long a delivery may stay unacknowledged before it is redelivered (default 30 s);
	// InProgress restarts it.
	AckWait time.Duration
	// MaxDeliver bounds deliveries (default unlimited).
	MaxDeliver int
	// BackOff overrides AckWait for successive redeliveries (its length must be below MaxDeliver).
	BackOff []time.Duration
	// MaxAckPending bounds unacknowledged deliveries across all replicas (default 1000).
	MaxAckPending int
	// Description is free text for operators.
	Description string
}

// EnsureConsumer creates a durable consumer or updates its settings; calling it again changes nothing.
func (b *Bus) EnsureConsumer(ctx context.Context, cfg ConsumerConfig) error {
	if cfg.Stream == "" || cfg.Durable == "" || cfg.Filter == "" {
		return fmt.Errorf("ensure consumer: stream, durable and filter are required")
	}
	defaults.Positive(&cfg.AckWait, 30*time.Second)
	if cfg.MaxDeliver == 0 {
		cfg.MaxDeliver = -1
	}
	defaults.Positive(&cfg.MaxAckPending, 1000)
	jc := jetstream.ConsumerConfig{
		Durable:       cfg.Durable,
		Description:   cfg.Description,
		FilterSubject: cfg.Filter,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       cfg.AckWait,
		MaxDeliver:    cfg.MaxDeliver,
		BackOff:       cfg.BackOff,
		MaxAckPending: cfg.MaxAckPending,
		DeliverPolicy: jetstream.DeliverAllPolicy,
	}
	actx, cancel := b.api(ctx)
	defer cancel()
	if _, err := b.js.CreateOrUpdateConsumer(actx, cfg.Stream, jc); err != nil {
		return fmt.Errorf("ensure consumer %s on %s: %w", cfg.Durable, cfg.Stream, err)
	}
	return nil
}

// ConsumeOptions tune Consume.
type ConsumeOptions struct {
	// Concurrency is how many deliveries are handled at once (default 1). Consume fetches only as many
	// messages as there are free handler slots, so no ack timer runs on a message nobody works on.
	Concurrency int
	// MaxWait is how long one pull waits for messages (default 5 s).
	MaxWait time.Duration
	// RetryDelay is the redelivery delay after a handler returns a plain error (default 5 s).
	RetryDelay time.Duration
}

// Handler handles one delivery. A handler that settles the delivery itself (Ack, NakWithDelay, Term)
// decides; otherwise returning nil acknowledges it, an error made with Terminal terminates it (no
// redelivery), and any other error redelivers it after ConsumeOptions.RetryDelay.
type Handler func(ctx context.Context, d *Delivery) error

type terminalError struct{ err error }

func (e terminalError) Error() string { return e.err.Error() }
func (e terminalError) Unwrap() error { return e.err }

// Terminal marks a handler error as terminal: the delivery is terminated with the error as its reason.
func Terminal(err error) error {
	if err == nil {
		return nil
	}
	return terminalError{err}
}

// IsTerminal reports whether err was marked with Terminal.
func IsTerminal(err error) bool {
	var t terminalError
	return errors.As(err, &t)
}

// Consume handles the messages of a durable pull consumer until ctx is cancelled, then stops fetching and
// waits for the handlers in flight. The consumer must exist (EnsureConsumer).
func (b *Bus) Consume(ctx context.Context, stream, durable string, opts ConsumeOptions, h Handler) error {
	defaults.Positive(&opts.Concurrency, 1)
	defaults.Positive(&opts.MaxWait, 5*time.Second)
	defaults.Positive(&opts.RetryDelay, 5*time.Second)
	actx, cancel := b.api(ctx)
	cons, err := b.js.Consumer(actx, stream, durable)
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("consume %s/%s: %w", stream, durable, err)
	}
	maxDeliver := cons.CachedInfo().Config.MaxDeliver

	slots := make(chan struct{}, opts.Concurrency)
	var wg sync.WaitGroup
	defer wg.Wait()
	backoff := 100 * time.Millisecond
	for {
		// Wait for one free slot, then take every other free one: fetch what can be worked on now.
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return nil
		}
		n := 1
	more:
		for n < opts.Concurrency {
			select {
			case slots <- struct{}{}:
				n++
			default:
				break more
			}
		}
		fctx, fcancel := context.WithTimeout(ctx, opts.MaxWait)
		batch, err := cons.Fetch(n, jetstream.FetchContext(fctx))
		got := 0
		if err == nil {
			for msg := range batch.Messages() {
				got++
				d := &Delivery{msg: msg, bus: b, maxDeliver: maxDeliver}
				wg.Add(1)
				go func() {
					defer wg.Done()
					defer func() { <-slots }()
					b.handle(ctx, d, h, opts.RetryDelay)
				}()
			}
			err = batch.Error()
		}
		fcancel()
		for range n - got {
			<-slots
		}
		if ctx.Err() != nil {
			return nil
		}
		if err != nil && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, nats.ErrTimeout) {
			b.log.Warn("fetch failed", "stream", stream, "consumer", durable, "err", err)
			select {
			case <-time.After(backoff):
			case <-ctx.Done():
				return nil
			}
			backoff = min(2*backoff, 5*time.Second)
			continue
		}
		backoff = 100 * time.Millisecond
	}
}

func (b *Bus) handle(ctx context.Context, d *Delivery, h Handler, retry time.Duration) {
	err := h(ctx, d)
	if d.isSettled() {
		return
	}
	// Settle even while stopping: a finished handler's work must not be redelivered.
	sctx := context.WithoutCancel(ctx)
	var serr error
	switch {
	case err == nil:
		serr = d.Ack(sctx)
	case IsTerminal(err):
		serr = d.Term(err.Error())
	case ctx.Err() != nil:
		// Stopping: hand the message to another replica now.
		serr = d.NakWithDelay(0)
	default:
		b.log.Warn("handler failed; redelivering", "subject", d.Subject(), "stream_seq", d.StreamSequence(), "err", err)
		serr = d.NakWithDelay(retry)
	}
	if serr != nil {
		b.log.Warn("settle delivery", "subject", d.Subject(), "stream_seq", d.StreamSequence(), "err", serr)
	}
}

// Delivery is one message handed to a Handler.
type Delivery struct {
	msg        jetstream.Msg
	bus        *Bus
	maxDeliver int

	mu      sync.Mutex
	settled bool
}

// Subject the message was published to.
func (d *Delivery) Subject() string { return d.msg.Subject() }

// Type is the message's Proxops-Type.
func (d *Delivery) Type() string { return d.msg.Headers().Get(HeaderType) }

// Header returns the message's headers.
func (d *Delivery) Header() nats.Header { return d.msg.Headers() }

// Decode checks the message's type and unmarshals it into into (refusing any other type).
func (d *Delivery) Decode(ctx context.Context, into proto.Message) error {
	if err := d.bus.decode(ctx, d.msg.Headers(), d.msg.Data(), into); err != nil {
		return fmt.Errorf("decode %s#%d: %w", d.Subject(), d.StreamSequence(), err)
	}
	return nil
}

func (d *Delivery) meta() *jetstream.MsgMetadata {
	m, err := d.msg.Metadata()
	if err != nil {
		return &jetstream.MsgMetadata{}
	}
	return m
}

// StreamSequence is the message's sequence in its stream.
func (d *Delivery) StreamSequence() uint64 { return d.meta().Sequence.Stream }

// NumDelivered is 1 on the first delivery.
func (d *Delivery) NumDelivered() uint64 { return d.meta().NumDelivered }

// Timestamp is when the message was stored.
func (d *Delivery) Timestamp() time.Time { return d.meta().Timestamp }

// LastDelivery reports whether this is the consumer's last delivery of the message (MaxDeliver reached):
// a handler that cannot succeed now should dead-letter it.
func (d *Delivery) LastDelivery() bool {
	return d.maxDeliver > 0 && d.NumDelivered() >= uint64(d.maxDeliver)
}

func (d *Delivery) settle() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.settled {
		return false
	}
	d.settled = true
	return true
}

func (d *Delivery) isSettled() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.settled
}

// Ack acknowledges the delivery and waits until the server has recorded it (on a work queue the message is
// then gone).
func (d *Delivery) Ack(ctx context.Context) error {
	if !d.settle() {
		return nil
	}
	actx, cancel := d.bus.api(ctx)
	defer cancel()
	if err := d.msg.DoubleAck(actx); err != nil {
		return fmt.Errorf("ack %s#%d: %w", d.Subject(), d.StreamSequence(), err)
	}
	return nil
}

// InProgress restarts the ack timer: call it periodically while a long task runs.
func (d *Delivery) InProgress() error {
	if err := d.msg.InProgress(); err != nil {
		return fmt.Errorf("in progress %s#%d: %w", d.Subject(), d.StreamSequence(), err)
	}
	return nil
}

// NakWithDelay asks for redelivery after delay (0: at once).
func (d *Delivery) NakWithDelay(delay time.Duration) error {
	if !d.settle() {
		return nil
	}
	var err error
	if delay <= 0 {
		err = d.msg.Nak()
	} else {
		err = d.msg.NakWithDelay(delay)
	}
	if err != nil {
		return fmt.Errorf("nak %s#%d: %w", d.Subject(), d.StreamSequence(), err)
	}
	return nil
}

// Term stops redelivery of the message for good, with a reason the server reports in its advisory.
func (d *Delivery) Term(reason string) error {
	if !d.settle() {
		return nil
	}
	if err := d.msg.TermWithReason(reason); err != nil {
		return fmt.Errorf("term %s#%d: %w", d.Subject(), d.StreamSequence(), err)
	}
	return nil
}

// DeadLetter copies the message, headers and body unchanged, to a dead-letter subject (see DLQSubject) with
// the reason and origin in headers, then terminates the delivery so a work queue drops it.
func (d *Delivery) DeadLetter(ctx context.Context, subject, reason string) error {
	if d.isSettled() {
		return fmt.Errorf("dead-letter %s#%d: already settled", d.Subject(), d.StreamSequence())
	}
	meta := d.meta()
	if err := d.bus.deadLetter(ctx, meta.Stream, meta.Sequence.Stream, d.msg.Headers(), d.msg.Data(), subject, reason, ""); err != nil {
		return err
	}
	return d.Term(reason)
}

// DeadLetterRefused is DeadLetter for a message its consumer refused to act on (an operation no trusted
// planner signed, for example): the copy also carries code, the refusal's reason code, in HeaderRefused, so
// readers of the dead letters (the status service) can tell refusals from messages that ran out of
// deliveries.
func (d *Delivery) DeadLetterRefused(ctx context.Context, subject, code, reason string) error {
	if d.isSettled() {
		return fmt.Errorf("dead-letter %s#%d: already settled", d.Subject(), d.StreamSequence())
	}
	if code == "" {
		return fmt.Errorf("dead-letter %s#%d: a refusal needs a reason code", d.Subject(), d.StreamSequence())
	}
	meta := d.meta()
	if err := d.bus.deadLetter(ctx, meta.Stream, meta.Sequence.Stream, d.msg.Headers(), d.msg.Data(), subject, reason, code); err != nil {
		return err
	}
	return d.Term(reason)
}

// deadLetter publishes the dead-letter copy of message seq of stream (its headers but the server's Nats-*
// ones, and its body) under a message id naming its origin, so it is stored once.
func (b *Bus) deadLetter(ctx context.Context, stream string, seq uint64, header nats.Header, data []byte, subject, reason, refused string) error {
	msg := nats.NewMsg(subject)
	for k, v := range header {
		if len(k) >= 5 && k[:5] == "Nats-" {
			continue
		}
		msg.Header[k] = v
	}
	from := stream + ":" + seqString(seq)
	msg.Header.Set(HeaderDeadLetterFrom, from)
	msg.Header.Set(HeaderDeadLetterReason, reason)
	msg.Header.Del(HeaderRefused)
	if refused != "" {
		msg.Header.Set(HeaderRefused, refused)
	}
	msg.Data = data
	actx, cancel := b.api(ctx)
	defer cancel()
	if _, err := b.js.PublishMsg(actx, msg, jetstream.WithMsgID("dlq:"+from)); err != nil {
		return fmt.Errorf("dead-letter %s#%d: %w", stream, seq, err)
	}
	return nil
}

// ReadStream calls fn with every message of a stream matching filter from sequence from (1 or 0: the
// beginning) up to the last one stored when the read began. A planner reloads an open run with it.
func (b *Bus) ReadStream(ctx context.Context, stream, filter string, from uint64, fn func(*Message) error) error {
	cfg := jetstream.ConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy}
	if from > 1 {
		cfg.DeliverPolicy = jetstream.DeliverByStartSequencePolicy
		cfg.OptStartSeq = from
	}
	return b.read(ctx, stream, filter, cfg, fn)
}

// LastPerSubject returns the last message of every subject of a stream matching filter, in stream order
// (status and the adopter read the latest inventory, gap report or status this way).
func (b *Bus) LastPerSubject(ctx context.Context, stream, filter string) ([]*Message, error) {
	var out []*Message
	err := b.read(ctx, stream, filter, jetstream.ConsumerConfig{DeliverPolicy: jetstream.DeliverLastPerSubjectPolicy},
		func(m *Message) error { out = append(out, m); return nil })
	return out, err
}

// LastMessage returns the last message stored on one subject, or ErrNotFound.
func (b *Bus) LastMessage(ctx context.Context, stream, subject string) (*Message, error) {
	actx, cancel := b.api(ctx)
	defer cancel()
	s, err := b.js.Stream(actx, stream)
	if err != nil {
		return nil, fmt.Errorf("last message on %s: %w", subject, err)
	}
	raw, err := s.GetLastMsgForSubject(actx, subject)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, fmt.Errorf("last message on %s: %w", subject, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("last message on %s: %w", subject, err)
	}
	return &Message{Subject: raw.Subject, Sequence: raw.Sequence, Header: raw.Header, Data: raw.Data, bus: b}, nil
}

// read drains an ephemeral consumer up to the messages pending when it was created.
func (b *Bus) read(ctx context.Context, stream, filter string, cfg jetstream.ConsumerConfig, fn func(*Message) error) error {
	cfg.FilterSubject = filter
	cfg.AckPolicy = jetstream.AckNonePolicy
	cfg.InactiveThreshold = time.Minute
	cfg.MemoryStorage = true
	actx, cancel := b.api(ctx)
	cons, err := b.js.CreateConsumer(actx, stream, cfg)
	cancel()
	if err != nil {
		return fmt.Errorf("read %s %s: %w", stream, filter, err)
	}
	name := cons.CachedInfo().Name
	defer func() {
		dctx, cancel := b.api(context.WithoutCancel(ctx))
		defer cancel()
		_ = b.js.DeleteConsumer(dctx, stream, name)
	}()
	pending := cons.CachedInfo().NumPending
	for pending > 0 {
		fctx, fcancel := context.WithTimeout(ctx, b.opts.APITimeout)
		batch, err := cons.Fetch(int(min(pending, 256)), jetstream.FetchContext(fctx))
		if err != nil {
			fcancel()
			return fmt.Errorf("read %s %s: %w", stream, filter, err)
		}
		got := 0
		for msg := range batch.Messages() {
			got++
			meta, err := msg.Metadata()
			if err != nil {
				fcancel()
				return fmt.Errorf("read %s %s: %w", stream, filter, err)
			}
			m := &Message{Subject: msg.Subject(), Sequence: meta.Sequence.Stream, Header: msg.Headers(), Data: msg.Data(), bus: b}
			if err := fn(m); err != nil {
				fcancel()
				return err
			}
			pending = meta.NumPending
		}
		err = batch.Error()
		fcancel()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if got == 0 {
			if err != nil && !errors.Is(err, context.DeadlineExceeded) {
				return fmt.Errorf("read %s %s: %w", stream, filter, err)
			}
			// Messages counted as pending were removed meanwhile (age, per-subject limit).
			return nil
		}
	}
	return nil
}

// LastSequence returns the stream sequence of the last message matching filter (wildcards allowed), or 0
// when no message matches.
func (b *Bus) LastSequence(ctx context.Context, stream, filter string) (uint64, error) {
	m, err := b.LastMessage(ctx, stream, filter)
	if errors.Is(err, ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return m.Sequence, nil
}
