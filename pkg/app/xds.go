package app

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing/fstest"
	"time"

	"github.com/spf13/pflag"
	"go.opentelemetry.io/otel/metric"

	"github.com/tollgatehq/tollgate/pkg/descriptor"
	"github.com/tollgatehq/tollgate/pkg/reload"
	"github.com/tollgatehq/tollgate/pkg/xds"
)

// XDSSettings choose where the rules come from and, for xDS, how to reach
// the server.
type XDSSettings struct {
	// ConfigType is file (ConfigDir, watched) or xds.
	ConfigType    string        `mapstructure:"config-type"`
	Server        string        `mapstructure:"xds-server"`
	NodeID        string        `mapstructure:"xds-node-id"`
	NodeMetadata  string        `mapstructure:"xds-node-metadata"`
	Headers       Secret        `mapstructure:"xds-headers"` // may carry tokens: never printed
	RetryInterval time.Duration `mapstructure:"xds-retry-interval"`
	TLS           bool          `mapstructure:"xds-tls"`
	TLSCA         string        `mapstructure:"xds-tls-ca"`
	TLSCert       string        `mapstructure:"xds-tls-cert"`
	TLSKey        string        `mapstructure:"xds-tls-key"`
	TLSSAN        string        `mapstructure:"xds-tls-san"`
	// ForceStart serves with no rules (every descriptor OK) until the
	// first xDS update, rather than staying unready.
	ForceStart bool `mapstructure:"force-start-without-initial-config"`
}

func (XDSSettings) flags(fs *pflag.FlagSet) {
	fs.String("config-type", "file", "where the rules come from: file (--config-dir, watched) or xds (RateLimitConfig resources from --xds-server)")
	fs.String("xds-server", xds.DefaultServer, "xds: the xDS server's address (gRPC target)")
	fs.String("xds-node-id", xds.DefaultNodeID, "xds: the node id sent to the server")
	fs.String("xds-node-metadata", "", `xds: node metadata, a JSON object of strings such as {"cluster":"eg"}`)
	fs.String("xds-headers", "", "xds: extra request headers of the stream, name=value pairs separated by commas")
	fs.Duration("xds-retry-interval", xds.DefaultRetryInterval, "xds: first wait before reconnecting; it doubles per failed attempt up to a minute, jittered")
	fs.Bool("xds-tls", false, "xds: connect over TLS")
	fs.String("xds-tls-ca", "", "xds: PEM file of the CA that signed the server certificate (default: system roots)")
	fs.String("xds-tls-cert", "", "xds: PEM client certificate for mutual TLS")
	fs.String("xds-tls-key", "", "xds: PEM client key for mutual TLS")
	fs.String("xds-tls-san", "", "xds: name the server certificate must carry (default: the host of --xds-server)")
	fs.Bool("force-start-without-initial-config", false, "xds: until the first update, serve with no rules (all OK) instead of staying unready")
}

// validate reports every invalid xDS setting.
func (x XDSSettings) validate() error {
	switch x.ConfigType {
	case "file":
		return nil
	case "xds":
	default:
		return fmt.Errorf("config-type: unknown type %q (want file or xds)", x.ConfigType)
	}
	var errs []error
	if _, err := x.nodeMetadata(); err != nil {
		errs = append(errs, err)
	}
	if _, err := x.headers(); err != nil {
		errs = append(errs, err)
	}
	if x.RetryInterval <= 0 {
		errs = append(errs, fmt.Errorf("xds-retry-interval: must be positive, got %v", x.RetryInterval))
	}
	if x.TLS && (x.TLSCert == "") != (x.TLSKey == "") {
		errs = append(errs, errors.New("xds-tls-cert, xds-tls-key: give both or neither"))
	}
	return errors.Join(errs...)
}

func (x XDSSettings) nodeMetadata() (map[string]string, error) {
	if x.NodeMetadata == "" {
		return nil, nil
	}
	var md map[string]string
	if err := json.Unmarshal([]byte(x.NodeMetadata), &md); err != nil {
		return nil, fmt.Errorf("xds-node-metadata: want a JSON object of strings: %w", err)
	}
	return md, nil
}

func (x XDSSettings) headers() (map[string]string, error) {
	if x.Headers == "" {
		return nil, nil
	}
	h := map[string]string{}
	for pair := range strings.SplitSeq(string(x.Headers), ",") {
		name, value, ok := strings.Cut(strings.TrimSpace(pair), "=")
		if !ok || name == "" {
			return nil, fmt.Errorf("xds-headers: %q is not name=value", pair)
		}
		h[strings.ToLower(name)] = value
	}
	return h, nil
}

// newXDS returns a reloader fed by an xDS client, and the client, which
// the caller runs. Until the first update the reloader serves nothing (not
// ready) or, with ForceStart, an empty tree.
func newXDS(s Settings, logger *slog.Logger, meters metric.MeterProvider, onChange func(*descriptor.Tree)) (*reload.Reloader, *xds.Client, error) {
	opts, err := s.descriptorOptions()
	if err != nil {
		return nil, nil, err
	}
	x := s.XDS
	var initial *descriptor.Tree
	if x.ForceStart {
		if initial, err = descriptor.LoadFS(fstest.MapFS{}, opts); err != nil {
			return nil, nil, err
		}
	}
	rules, err := reload.New(reload.Options{Source: "xds", Initial: initial, Logger: logger, MeterProvider: meters, OnChange: onChange})
	if err != nil {
		return nil, nil, err
	}
	md, err := x.nodeMetadata()
	if err != nil {
		return nil, nil, err
	}
	headers, err := x.headers()
	if err != nil {
		return nil, nil, err
	}
	copts := xds.Options{
		Rules: rules, Descriptor: opts,
		Server: x.Server, NodeID: x.NodeID, NodeMetadata: md, Headers: headers,
		RetryInterval: x.RetryInterval,
		Logger:        logger, MeterProvider: meters,
	}
	if x.TLS {
		if copts.TLS, err = xds.ClientTLS(xds.TLSFiles{CA: x.TLSCA, Cert: x.TLSCert, Key: x.TLSKey, SAN: x.TLSSAN}); err != nil {
			return nil, nil, err
		}
	}
	client, err := xds.New(copts)
	if err != nil {
		return nil, nil, err
	}
	return rules, client, nil
}
