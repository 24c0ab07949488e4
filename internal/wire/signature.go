package wire

import (
	"context"
	"fmt"

	"google.golang.org/protobuf/proto"

	planv1 "github.com/proxops/proxops/internal/gen/proxops/plan/v1"
	"github.com/proxops/proxops/internal/plan"
)

// SignFunc signs an operation's canonical bytes and names the public key that verifies the signature.
type SignFunc func(payload []byte) (signer string, signature []byte, err error)

// Signature is what an operation carries about who signed it: the signer's public key, the signature, and
// the canonical bytes the signature must cover (recomputed by the receiver, never taken from the sender).
type Signature struct {
	Signer    string
	Signature []byte
	Payload   []byte
}

// operationSigningBytes is an operation's canonical encoding: deterministic protobuf of the message with
// signer and signature cleared. Fields a newer planner adds and this build does not know are kept as
// received and covered too. p is the caller's own message: the two fields are cleared for the encoding and
// put back, rather than the whole operation copied.
func operationSigningBytes(p *planv1.Operation) ([]byte, error) {
	signer, sig := p.Signer, p.Signature
	p.Signer, p.Signature = "", nil
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(p)
	p.Signer, p.Signature = signer, sig
	if err != nil {
		return nil, fmt.Errorf("operation %s: canonical bytes: %w", p.GetOpId(), err)
	}
	return b, nil
}

// SignOperation converts an operation to a proxops.plan.v1.Operation and signs it with sign.
func SignOperation(o plan.Operation, sign SignFunc) (proto.Message, error) {
	p, err := operationToProto(o)
	if err != nil {
		return nil, fmt.Errorf("operation %s: %w", o.ID, err)
	}
	payload, err := operationSigningBytes(p)
	if err != nil {
		return nil, err
	}
	signer, sig, err := sign(payload)
	if err != nil {
		return nil, fmt.Errorf("operation %s: sign: %w", o.ID, err)
	}
	p.Signer, p.Signature = signer, sig
	return p, nil
}

// DecodeSignedOperation decodes a received proxops.plan.v1.Operation and returns it with its signature and
// the canonical bytes that signature must cover.
func DecodeSignedOperation(ctx context.Context, decode DecodeFunc) (plan.Operation, Signature, error) {
	p := &planv1.Operation{}
	if err := decode(ctx, p); err != nil {
		return plan.Operation{}, Signature{}, err
	}
	o, err := OperationFromProto(p)
	if err != nil {
		return plan.Operation{}, Signature{}, err
	}
	payload, err := operationSigningBytes(p)
	if err != nil {
		return plan.Operation{}, Signature{}, err
	}
	return o, Signature{Signer: p.GetSigner(), Signature: p.GetSignature(), Payload: payload}, nil
}
