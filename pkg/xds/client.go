package xds

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/tollgatehq/tollgate/pkg/descriptor"
)

// Defaults, those of envoyproxy/ratelimit where it has the setting.
const (
	// DefaultServer is the address used when Options.Server is empty.
	DefaultServer = "localhost:18000"
	// DefaultNodeID is the node id used when Options.NodeID is empty.
	DefaultNodeID = "default"
	// DefaultRetryInterval is the first wait before reconnecting.
	DefaultRetryInterval = 3 * time.Second
	// DefaultMaxRetryInterval bounds the wait between reconnects.
	DefaultMaxRetryInterval = 60 * time.Second
)

// meterName is the instrumentation scope of the xDS metrics.
const meterName = "github.com/tollgatehq/tollgate/pkg/xds"

// Rules is where the client hands each update: Apply builds the tree with
// load and swaps it in all or nothing, returning why it did not.
// *reload.Reloader satisfies it.
type Rules interface {
	Apply(reason string, load func() (*descriptor.Tree, error)) error
}

// Options configures a Client. Only Rules is required.
type Options struct {
	// Rules receives every update. Required.
	Rules Rules
	// Descriptor are the options every update is loaded with; give the
	// ones a configuration directory would be loaded with.
	Descriptor descriptor.Options
	// Server is the xDS server's address, a gRPC target such as
	// "envoy-gateway:18001". Empty means DefaultServer.
	Server string
	// NodeID identifies this client to the server. Empty means
	// DefaultNodeID.
	NodeID string
	// NodeMetadata is sent as the node's metadata, each value a string.
	NodeMetadata map[string]string
	// Headers are added to the stream's request metadata.
	Headers map[string]string
	// RetryInterval is the first wait before reconnecting; each further
	// failed attempt doubles it up to MaxRetryInterval, and every wait is
	// jittered down by up to half. A stream that delivered an update
	// starts again from RetryInterval. Zero means DefaultRetryInterval.
	RetryInterval time.Duration
	// MaxRetryInterval bounds the wait. Zero means DefaultMaxRetryInterval
	// (or RetryInterval, if that is longer).
	MaxRetryInterval time.Duration
	// TLS, when set, secures the connection; see ClientTLS. Nil means
	// plaintext.
	TLS *tls.Config
	// Logger receives stream events. Nil discards them.
	Logger *slog.Logger
	// MeterProvider creates the xDS metrics. Nil disables them.
	MeterProvider metric.MeterProvider
}

// Client subscribes to RateLimitConfig resources over an aggregated
// discovery stream and feeds each update to Rules.
type Client struct {
	opts    Options
	node    *corev3.Node
	log     *slog.Logger
	updates metric.Int64Counter
	streams metric.Int64Counter
	ack     metric.MeasurementOption
	nack    metric.MeasurementOption

	// lastAcked is the version_info of the last update applied, and
	// rejected the last update refused since; only Run's goroutine
	// touches them.
	lastAcked string
	rejected  *discoveryv3.DiscoveryResponse
	rejectErr error
}

// New checks opts and returns a Client; Run connects.
func New(opts Options) (*Client, error) {
	if opts.Rules == nil {
		return nil, errors.New("xds: Options.Rules is nil")
	}
	opts.Server = cmp.Or(opts.Server, DefaultServer)
	opts.NodeID = cmp.Or(opts.NodeID, DefaultNodeID)
	if opts.RetryInterval <= 0 {
		opts.RetryInterval = DefaultRetryInterval
	}
	if opts.MaxRetryInterval <= 0 {
		opts.MaxRetryInterval = DefaultMaxRetryInterval
	}
	opts.MaxRetryInterval = max(opts.MaxRetryInterval, opts.RetryInterval)

	node := &corev3.Node{Id: opts.NodeID, UserAgentName: "tollgate"}
	if len(opts.NodeMetadata) > 0 {
		fields := make(map[string]any, len(opts.NodeMetadata))
		for k, v := range opts.NodeMetadata {
			fields[k] = v
		}
		md, err := structpb.NewStruct(fields)
		if err != nil {
			return nil, fmt.Errorf("xds: node metadata: %w", err)
		}
		node.Metadata = md
	}

	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := &Client{
		opts: opts,
		node: node,
		log:  log.With(slog.String("component", "xds"), slog.String("server", opts.Server), slog.String("node", opts.NodeID)),
		ack:  metric.WithAttributeSet(attribute.NewSet(attribute.String("result", "ack"))),
		nack: metric.WithAttributeSet(attribute.NewSet(attribute.String("result", "nack"))),
	}
	mp := opts.MeterProvider
	if mp == nil {
		mp = noop.NewMeterProvider()
	}
	meter := mp.Meter(meterName)
	var err error
	if c.updates, err = meter.Int64Counter("tollgate.xds.updates",
		metric.WithDescription("xDS updates received, by result: ack (applied) or nack (rejected, previous rules kept)")); err != nil {
		return nil, fmt.Errorf("xds: creating metrics: %w", err)
	}
	if c.streams, err = meter.Int64Counter("tollgate.xds.stream_failures",
		metric.WithDescription("xDS streams that failed or could not be opened")); err != nil {
		return nil, fmt.Errorf("xds: creating metrics: %w", err)
	}
	return c, nil
}

// Run keeps a stream to the server open until ctx is done, reconnecting
// with backoff, and returns nil then. While the server is away the rules
// last applied stay live. Run may be called once.
func (c *Client) Run(ctx context.Context) error {
	creds := insecure.NewCredentials()
	if c.opts.TLS != nil {
		creds = credentials.NewTLS(c.opts.TLS)
	}
	attempt := 0
	for ctx.Err() == nil {
		updated, err := c.session(ctx, creds)
		if ctx.Err() != nil {
			return nil
		}
		if updated {
			attempt = 0
		}
		wait := c.backoff(attempt)
		attempt++
		c.streams.Add(ctx, 1)
		c.log.Warn("xDS stream ended; reconnecting", slog.Any("error", err), slog.Duration("after", wait))
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
	return nil
}

// backoff returns the wait before reconnect attempt n (0 first): the retry
// interval doubled n times, at most the maximum, less up to half of it at
// random so that a fleet does not reconnect in step.
func (c *Client) backoff(n int) time.Duration {
	d := c.opts.RetryInterval
	for i := 0; i < n && d < c.opts.MaxRetryInterval; i++ {
		d *= 2
	}
	d = min(d, c.opts.MaxRetryInterval)
	return d - rand.N(d/2+1)
}

// session runs one stream until it fails or ctx is done. It reports
// whether any update was received on it.
func (c *Client) session(ctx context.Context, creds credentials.TransportCredentials) (updated bool, err error) {
	conn, err := grpc.NewClient(c.opts.Server, grpc.WithTransportCredentials(creds))
	if err != nil {
		return false, fmt.Errorf("connecting to %s: %w", c.opts.Server, err)
	}
	defer conn.Close()

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if len(c.opts.Headers) > 0 {
		kv := make([]string, 0, 2*len(c.opts.Headers))
		for k, v := range c.opts.Headers {
			kv = append(kv, k, v)
		}
		ctx = metadata.AppendToOutgoingContext(ctx, kv...)
	}
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		return false, fmt.Errorf("opening the stream: %w", err)
	}
	// A new stream asks without a version, so the server sends its
	// current resources whatever it remembers; resending rules already
	// live swaps nothing.
	if err := stream.Send(&discoveryv3.DiscoveryRequest{Node: c.node, TypeUrl: TypeURL}); err != nil {
		return false, fmt.Errorf("subscribing: %w", err)
	}
	for {
		resp, err := stream.Recv()
		if err != nil {
			return updated, fmt.Errorf("receiving: %w", err)
		}
		updated = true
		req, again := c.handle(resp)
		if again {
			// go-control-plane's server answers a NACK by offering the
			// same version again at once; pace the refusals so that the
			// two sides do not spin.
			t := time.NewTimer(c.opts.RetryInterval)
			select {
			case <-ctx.Done():
				t.Stop()
				return updated, ctx.Err()
			case <-t.C:
			}
		}
		if err := stream.Send(req); err != nil {
			return updated, fmt.Errorf("answering version %q: %w", resp.GetVersionInfo(), err)
		}
	}
}

// handle applies one response and returns its ACK or NACK. It reports
// again when the response offers the update it rejected last, which it
// refuses again without rebuilding it.
func (c *Client) handle(resp *discoveryv3.DiscoveryResponse) (req *discoveryv3.DiscoveryRequest, again bool) {
	version := resp.GetVersionInfo()
	req = &discoveryv3.DiscoveryRequest{Node: c.node, TypeUrl: TypeURL, ResponseNonce: resp.GetNonce()}
	var err error
	if c.sameAsRejected(resp) {
		c.log.Debug("xDS update offered again after a NACK; refusing it again", slog.String("version", version))
		req.VersionInfo = c.lastAcked
		req.ErrorDetail = &status.Status{Code: int32(codes.InvalidArgument), Message: c.rejectErr.Error()}
		return req, true
	}
	if resp.GetTypeUrl() != TypeURL {
		err = fmt.Errorf("%w: response of type %q, subscribed to %q", ErrUnsupported, resp.GetTypeUrl(), TypeURL)
	} else {
		err = c.opts.Rules.Apply("xds version "+version, func() (*descriptor.Tree, error) {
			return Build(resp.GetResources(), c.opts.Descriptor)
		})
	}
	if err != nil {
		c.updates.Add(context.Background(), 1, c.nack)
		c.log.Error("xDS update rejected; previous rules stay live",
			slog.String("version", version), slog.String("live_version", c.lastAcked), slog.Any("error", err))
		c.rejected, c.rejectErr = resp, err
		req.VersionInfo = c.lastAcked
		req.ErrorDetail = &status.Status{Code: int32(codes.InvalidArgument), Message: err.Error()}
		return req, false
	}
	c.updates.Add(context.Background(), 1, c.ack)
	c.log.Info("xDS update applied", slog.String("version", version), slog.Int("resources", len(resp.GetResources())))
	c.lastAcked = version
	c.rejected, c.rejectErr = nil, nil
	req.VersionInfo = version
	return req, false
}

// sameAsRejected reports whether resp offers what the last NACK refused:
// the same type, version and resources.
func (c *Client) sameAsRejected(resp *discoveryv3.DiscoveryResponse) bool {
	r := c.rejected
	if r == nil || r.GetVersionInfo() != resp.GetVersionInfo() || r.GetTypeUrl() != resp.GetTypeUrl() ||
		len(r.GetResources()) != len(resp.GetResources()) {
		return false
	}
	for i, res := range r.GetResources() {
		if !proto.Equal(res, resp.GetResources()[i]) {
			return false
		}
	}
	return true
}
