package bus

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
)

// TypeName is the full protobuf name of a message, the value of its Proxops-Type header.
func TypeName(m proto.Message) string {
	return string(m.ProtoReflect().Descriptor().FullName())
}

// ContentID is the content id of a message body: "sha256:" and the hex SHA-256 of data, the value of the
// Proxops-Content-Id header.
func ContentID(data []byte) string {
	h := sha256.Sum256(data)
	return "sha256:" + hex.EncodeToString(h[:])
}

// PubAck is the stream's acknowledgement of a publish.
type PubAck struct {
	Stream   string
	Sequence uint64
	// Duplicate: a message with the same Nats-Msg-Id was already stored (Sequence is the original's).
	Duplicate bool
}

// PublishOption refines a publish.
type PublishOption func(*publishOptions)

type publishOptions struct {
	msgID         string
	expectSeq     *uint64
	expectSubject string
}

// WithMsgID sets Nats-Msg-Id: a second publish with the same id within the duplicate window is not stored
// again.
func WithMsgID(id string) PublishOption {
	return func(o *publishOptions) { o.msgID = id }
}

// ExpectLastSubjectSequence makes the stream refuse the message (ErrWrongLastSequence) unless the last
// message on its subject has sequence seq (0: no message yet).
func ExpectLastSubjectSequence(seq uint64) PublishOption {
	return func(o *publishOptions) { o.expectSeq = &seq; o.expectSubject = "" }
}

// ExpectLastSequenceOn is ExpectLastSubjectSequence checked over every subject matching filter (for
// example every plan event of a cluster), so two writers of different subjects still exclude each other.
func ExpectLastSequenceOn(filter string, seq uint64) PublishOption {
	return func(o *publishOptions) { o.expectSeq = &seq; o.expectSubject = filter }
}

// Publish stores a protobuf message on a stream subject. A body above the payload limit is written to
// proxops_blobs and the message carries a reference that the decoding helpers resolve.
func (b *Bus) Publish(ctx context.Context, subject string, m proto.Message, opts ...PublishOption) (PubAck, error) {
	var o publishOptions
	for _, opt := range opts {
		opt(&o)
	}
	msg, blob, err := b.encode(ctx, subject, m)
	if err != nil {
		return PubAck{}, fmt.Errorf("publish %s: %w", subject, err)
	}
	var jopts []jetstream.PublishOpt
	if o.msgID != "" {
		jopts = append(jopts, jetstream.WithMsgID(o.msgID))
	}
	if o.expectSeq != nil {
		if o.expectSubject != "" {
			jopts = append(jopts, jetstream.WithExpectLastSequenceForSubject(*o.expectSeq, o.expectSubject))
		} else {
			jopts = append(jopts, jetstream.WithExpectLastSequencePerSubject(*o.expectSeq))
		}
	}
	actx, cancel := b.api(ctx)
	defer cancel()
	ack, err := b.js.PublishMsg(actx, msg, jopts...)
	if err != nil {
		b.dropBlob(ctx, blob)
		if isWrongLastSequence(err) {
			return PubAck{}, fmt.Errorf("publish %s: %w: %w", subject, ErrWrongLastSequence, err)
		}
		return PubAck{}, fmt.Errorf("publish %s: %w", subject, err)
	}
	if ack.Duplicate {
		b.dropBlob(ctx, blob)
	}
	return PubAck{Stream: ack.Stream, Sequence: ack.Sequence, Duplicate: ack.Duplicate}, nil
}

func isWrongLastSequence(err error) bool {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		return false
	}
	return apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant
}

// encode builds the NATS message for m, writing its body to proxops_blobs when it is too large. blob is the
// name of the object written, if any.
func (b *Bus) encode(ctx context.Context, subject string, m proto.Message) (msg *nats.Msg, blob string, err error) {
	if m == nil {
		return nil, "", errors.New("nil message")
	}
	data, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		return nil, "", fmt.Errorf("marshal %s: %w", TypeName(m), err)
	}
	msg = nats.NewMsg(subject)
	msg.Header.Set(HeaderType, TypeName(m))
	msg.Header.Set(HeaderContentType, ContentTypeProtobuf)
	msg.Header.Set(HeaderContentID, ContentID(data))
	if len(data) > b.blobThreshold() {
		name, sum, err := b.putBlob(ctx, data)
		if err != nil {
			return nil, "", err
		}
		msg.Header.Set(HeaderBlob, name)
		msg.Header.Set(HeaderBlobSHA256, sum)
		return msg, name, nil
	}
	msg.Data = data
	return msg, "", nil
}

// decode checks a message's type and unmarshals it into into, fetching its body from proxops_blobs when
// the message carries a reference.
func (b *Bus) decode(ctx context.Context, h nats.Header, data []byte, into proto.Message) error {
	want := TypeName(into)
	got := h.Get(HeaderType)
	if got == "" {
		return fmt.Errorf("%w: message has no %s header, want %s", ErrWrongType, HeaderType, want)
	}
	if got != want {
		return fmt.Errorf("%w: message is %s, want %s", ErrWrongType, got, want)
	}
	if ct := h.Get(HeaderContentType); ct != "" && ct != ContentTypeProtobuf {
		return fmt.Errorf("%w: content type %q, want %s", ErrWrongType, ct, ContentTypeProtobuf)
	}
	if name := h.Get(HeaderBlob); name != "" {
		body, err := b.getBlob(ctx, name, h.Get(HeaderBlobSHA256))
		if err != nil {
			return err
		}
		data = body
	}
	if err := proto.Unmarshal(data, into); err != nil {
		return fmt.Errorf("unmarshal %s: %w", want, err)
	}
	return nil
}

func (b *Bus) putBlob(ctx context.Context, data []byte) (name, sum string, err error) {
	obs, err := b.objectStore(ctx, ObjectBlobs)
	if err != nil {
		return "", "", fmt.Errorf("store large body: %w", err)
	}
	name, err = randomSecret()
	if err != nil {
		return "", "", err
	}
	h := sha256.Sum256(data)
	actx, cancel := b.api(ctx)
	defer cancel()
	if _, err := obs.Put(actx, jetstream.ObjectMeta{Name: name}, bytes.NewReader(data)); err != nil {
		return "", "", fmt.Errorf("store large body (%d bytes): %w", len(data), err)
	}
	return name, hex.EncodeToString(h[:]), nil
}

func (b *Bus) getBlob(ctx context.Context, name, sum string) ([]byte, error) {
	obs, err := b.objectStore(ctx, ObjectBlobs)
	if err != nil {
		return nil, fmt.Errorf("read large body: %w", err)
	}
	actx, cancel := b.api(ctx)
	defer cancel()
	data, err := obs.GetBytes(actx, name)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return nil, fmt.Errorf("read large body %s: %w", name, ErrBlobMissing)
	}
	if err != nil {
		return nil, fmt.Errorf("read large body %s: %w", name, err)
	}
	h := sha256.Sum256(data)
	if got := hex.EncodeToString(h[:]); got != sum {
		return nil, fmt.Errorf("read large body %s: sha256 %s does not match the message's %s", name, got, sum)
	}
	return data, nil
}

// dropBlob deletes a blob nobody will read (a duplicate publish, a failed send, a consumed reply).
func (b *Bus) dropBlob(ctx context.Context, name string) {
	if name == "" {
		return
	}
	obs, err := b.objectStore(ctx, ObjectBlobs)
	if err != nil {
		return
	}
	actx, cancel := b.api(context.WithoutCancel(ctx))
	defer cancel()
	if err := obs.Delete(actx, name); err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
		b.log.Warn("delete blob", "blob", name, "err", err)
	}
}

// Message is a stored stream message read back by ReadStream or LastPerSubject.
type Message struct {
	Subject  string
	Sequence uint64
	Header   nats.Header
	Data     []byte
	bus      *Bus
	// stream is set on a message read with StreamMessage.
	stream string
}

// Type is the message's Proxops-Type.
func (m *Message) Type() string { return m.Header.Get(HeaderType) }

// ContentID is the message's Proxops-Content-Id (empty for a message published before the header existed).
func (m *Message) ContentID() string { return m.Header.Get(HeaderContentID) }

// Decode checks the message's type and unmarshals it into into.
func (m *Message) Decode(ctx context.Context, into proto.Message) error {
	if err := m.bus.decode(ctx, m.Header, m.Data, into); err != nil {
		return fmt.Errorf("decode %s#%d: %w", m.Subject, m.Sequence, err)
	}
	return nil
}

func seqString(seq uint64) string { return strconv.FormatUint(seq, 10) }
