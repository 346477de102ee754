// Package rlsclient calls any Envoy RateLimitService (tollgate or another)
// over gRPC. The query and bench commands use it.
package rlsclient

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"strings"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/spf13/pflag"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/tollgatehq/tollgate/pkg/descriptor"
	"github.com/tollgatehq/tollgate/pkg/tlsfiles"
)

// Request is one ShouldRateLimit call in plain values.
type Request struct {
	Domain      string
	Descriptors [][]descriptor.Entry
	Hits        uint32 // request hits_addend; 0 means 1
}

// Proto returns r as Envoy's request message.
func (r Request) Proto() *rlsv3.RateLimitRequest {
	req := &rlsv3.RateLimitRequest{Domain: r.Domain, HitsAddend: r.Hits}
	for _, entries := range r.Descriptors {
		d := &ratelimitv3.RateLimitDescriptor{}
		for _, e := range entries {
			d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: e.Key, Value: e.Value})
		}
		req.Descriptors = append(req.Descriptors, d)
	}
	return req
}

// Client is a connection to a RateLimitService.
type Client struct {
	conn *grpc.ClientConn
	rls  rlsv3.RateLimitServiceClient
}

// Dial connects to addr over plain-text HTTP/2, as Envoy does by default.
func Dial(addr string) (*Client, error) { return DialTLS(addr, TLS{}) }

// DialTLS connects to addr over TLS as t says, or over plain text when t is
// the zero TLS.
func DialTLS(addr string, t TLS) (*Client, error) {
	creds, err := t.Credentials()
	if err != nil {
		return nil, err
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		return nil, fmt.Errorf("connecting to %s: %w", addr, err)
	}
	return &Client{conn: conn, rls: rlsv3.NewRateLimitServiceClient(conn)}, nil
}

// TLS is how a client dials TLS. Its zero value dials plain text; any field
// set turns TLS on.
type TLS struct {
	// Enabled turns TLS on with the system roots and no client
	// certificate, when no other field is set.
	Enabled bool
	// CAFile holds the PEM CA certificates that sign the server's; empty
	// means the system roots.
	CAFile string
	// CertFile and KeyFile are a PEM client certificate and key, for
	// servers that require one.
	CertFile, KeyFile string
	// ServerName is the name the server's certificate must carry; empty
	// means the host of the address.
	ServerName string
}

// Flags registers the fields as --tls, --tls-ca, --tls-cert, --tls-key and
// --tls-server-name on fs.
func (t *TLS) Flags(fs *pflag.FlagSet) {
	fs.BoolVar(&t.Enabled, "tls", false, "dial TLS (implied by any --tls-* flag)")
	fs.StringVar(&t.CAFile, "tls-ca", "", "PEM CA certificates that sign the server's certificate (default: system roots)")
	fs.StringVar(&t.CertFile, "tls-cert", "", "PEM client certificate, for servers that require one")
	fs.StringVar(&t.KeyFile, "tls-key", "", "PEM key of --tls-cert")
	fs.StringVar(&t.ServerName, "tls-server-name", "", "name the server certificate must carry (default: the address host)")
}

// Credentials returns the transport credentials that t describes.
func (t TLS) Credentials() (credentials.TransportCredentials, error) {
	cfg, err := t.Config()
	switch {
	case err != nil:
		return nil, err
	case cfg == nil:
		return insecure.NewCredentials(), nil
	}
	return credentials.NewTLS(cfg), nil
}

// Config returns the TLS configuration that t describes, or nil when t is
// the zero TLS: no TLS.
func (t TLS) Config() (*tls.Config, error) {
	if t == (TLS{}) {
		return nil, nil
	}
	cfg, err := tlsfiles.ClientConfig(tlsfiles.ClientOptions{CAFile: t.CAFile, CertFile: t.CertFile, KeyFile: t.KeyFile, ServerName: t.ServerName})
	if caErr, ok := errors.AsType[*tlsfiles.CAError](err); ok {
		if errors.Is(caErr.Err, tlsfiles.ErrNoCA) {
			return nil, fmt.Errorf("reading the TLS CA: no PEM certificate in %s", t.CAFile)
		}
		return nil, fmt.Errorf("reading the TLS CA: %w", caErr.Err)
	}
	if certErr, ok := errors.AsType[*tlsfiles.CertError](err); ok {
		if errors.Is(certErr.Err, tlsfiles.ErrCertWithoutKey) {
			return nil, errors.New("a TLS client certificate needs both a certificate and a key file")
		}
		return nil, fmt.Errorf("loading the TLS client certificate %s: %w", t.CertFile, certErr.Err)
	}
	return cfg, err
}

// Conn returns the underlying connection, for other services on it.
func (c *Client) Conn() *grpc.ClientConn { return c.conn }

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }

// WaitReady connects and waits until the connection is ready. It returns an
// error as soon as the first attempt fails (for example, connection refused)
// instead of retrying until ctx ends, so a wrong address is reported at once.
func (c *Client) WaitReady(ctx context.Context) error {
	c.conn.Connect()
	for {
		state := c.conn.GetState()
		switch state {
		case connectivity.Ready:
			return nil
		case connectivity.TransientFailure:
			return fmt.Errorf("connecting to %s: connection failed (is a RateLimitService listening there?)", c.conn.Target())
		case connectivity.Shutdown:
			return fmt.Errorf("connecting to %s: connection is closed", c.conn.Target())
		}
		if !c.conn.WaitForStateChange(ctx, state) {
			return fmt.Errorf("connecting to %s: %w", c.conn.Target(), ctx.Err())
		}
	}
}

// Query sends one ShouldRateLimit call.
func (c *Client) Query(ctx context.Context, r Request) (*rlsv3.RateLimitResponse, error) {
	return c.rls.ShouldRateLimit(ctx, r.Proto())
}

// Format renders a response for people: the overall code, one line per
// descriptor status, then the headers and body the service asked for.
func Format(resp *rlsv3.RateLimitResponse) string {
	var b strings.Builder
	fmt.Fprintf(&b, "overall: %s\n", resp.GetOverallCode())
	for i, st := range resp.GetStatuses() {
		fmt.Fprintf(&b, "descriptor %d: %s", i, st.GetCode())
		if l := st.GetCurrentLimit(); l != nil {
			per := strings.ToLower(l.GetUnit().String())
			if m := l.GetUnitMultiplier().GetValue(); m > 1 {
				per = fmt.Sprintf("%d %ss", m, per)
			}
			name := ""
			if l.GetName() != "" {
				name = fmt.Sprintf(" (%s)", l.GetName())
			}
			fmt.Fprintf(&b, ", limit %d per %s%s, remaining %d, reset in %s",
				l.GetRequestsPerUnit(), per, name, st.GetLimitRemaining(), st.GetDurationUntilReset().AsDuration())
		} else {
			b.WriteString(", no limit applies")
		}
		b.WriteByte('\n')
	}
	for _, h := range resp.GetResponseHeadersToAdd() {
		fmt.Fprintf(&b, "header: %s: %s\n", h.GetKey(), h.GetValue())
	}
	for _, h := range resp.GetRequestHeadersToAdd() {
		fmt.Fprintf(&b, "upstream header: %s: %s\n", h.GetKey(), h.GetValue())
	}
	if body := resp.GetRawBody(); len(body) > 0 {
		fmt.Fprintf(&b, "body: %s\n", body)
	}
	return b.String()
}

// ParseDescriptor reads descriptor entries written as "k=v,k2=v2". A value
// may contain "=" but not ","; an empty value ("k=") is legal, as in Envoy.
func ParseDescriptor(s string) ([]descriptor.Entry, error) {
	if s == "" {
		return nil, errors.New("empty descriptor")
	}
	var entries []descriptor.Entry
	for part := range strings.SplitSeq(s, ",") {
		key, value, ok := strings.Cut(part, "=")
		if !ok || key == "" {
			return nil, fmt.Errorf("entry %q is not key=value", part)
		}
		entries = append(entries, descriptor.Entry{Key: key, Value: value})
	}
	return entries, nil
}
