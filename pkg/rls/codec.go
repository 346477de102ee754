package rls

import (
	"slices"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	vtstructpb "github.com/planetscale/vtprotobuf/types/known/structpb"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// Codec returns the gRPC codec of a server of the rate-limit service, for
// grpc.ForceServerCodecV2. It is grpc's protobuf codec, except that it
// writes the dynamic_metadata of a RateLimitResponse itself, with
// vtprotobuf's generated encoder of google.protobuf.Struct: the protobuf
// runtime encodes a Struct's fields, a map, by reflection, copying every
// key twice, which made the decision metadata (on by default) cost more
// than the rest of the answer (BenchmarkShouldRateLimitWire). The bytes
// decode to the same message; only the metadata comes last on the wire,
// as the protobuf encoding allows.
//
// Unlike the runtime, the metadata's encoder does not check that its
// strings are valid UTF-8. They are: each comes from the request, which
// the runtime checked when it decoded it, or from the rules, whose
// loaders (YAML, xDS) refuse invalid UTF-8.
func Codec() encoding.CodecV2 {
	return codec{
		base:  encoding.GetCodecV2(grpcproto.Name),
		field: (&rlsv3.RateLimitResponse{}).ProtoReflect().Descriptor().Fields().ByName("dynamic_metadata").Number(),
	}
}

// codec is the Codec.
type codec struct {
	base  encoding.CodecV2
	field protowire.Number // RateLimitResponse.dynamic_metadata
}

// Marshal encodes v as the protobuf codec does, but for the metadata of a
// RateLimitResponse. While it encodes the rest of the answer it takes the
// metadata out of it, and puts it back before it returns: the answer is
// gRPC's to send, and used by no one else meanwhile.
func (c codec) Marshal(v any) (mem.BufferSlice, error) {
	resp, ok := v.(*rlsv3.RateLimitResponse)
	if !ok || resp.DynamicMetadata == nil {
		return c.base.Marshal(v)
	}
	md := resp.DynamicMetadata
	resp.DynamicMetadata = nil
	defer func() { resp.DynamicMetadata = md }()
	vt := (*vtstructpb.Struct)(md)
	mdSize := vt.SizeVT()
	size := proto.Size(resp) + protowire.SizeTag(c.field) + protowire.SizeBytes(mdSize)
	encode := func(b []byte) ([]byte, error) {
		// proto.Size just sized resp, so its sizes are current.
		b, err := proto.MarshalOptions{UseCachedSize: true}.MarshalAppend(b, resp)
		if err != nil {
			return nil, err
		}
		b = protowire.AppendTag(b, c.field, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(mdSize))
		n := len(b)
		b = slices.Grow(b, mdSize)[:n+mdSize]
		if _, err := vt.MarshalToSizedBufferVTStrict(b[n:]); err != nil {
			return nil, err
		}
		return b, nil
	}
	// Buffers are pooled as grpc's codec pools them.
	if mem.IsBelowBufferPoolingThreshold(size) {
		b, err := encode(make([]byte, 0, size))
		if err != nil {
			return nil, err
		}
		return mem.BufferSlice{mem.SliceBuffer(b)}, nil
	}
	pool := mem.DefaultBufferPool()
	buf := pool.Get(size)
	b, err := encode((*buf)[:0])
	if err != nil {
		pool.Put(buf)
		return nil, err
	}
	*buf = b
	return mem.BufferSlice{mem.NewBuffer(buf, pool)}, nil
}

// Unmarshal decodes as the protobuf codec does.
func (c codec) Unmarshal(data mem.BufferSlice, v any) error {
	return c.base.Unmarshal(data, v)
}

// Name returns the protobuf codec's name, "proto".
func (c codec) Name() string { return c.base.Name() }
