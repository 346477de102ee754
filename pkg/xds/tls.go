package xds

import (
	"crypto/tls"
	"errors"
	"fmt"

	"github.com/tollgatehq/tollgate/pkg/tlsfiles"
)

// TLSFiles names the files and the name a TLS connection to the xDS server
// uses, as envoyproxy/ratelimit's CONFIG_GRPC_XDS_* settings do.
type TLSFiles struct {
	// CA is a PEM file of the CAs that may sign the server's certificate.
	// Empty means the system roots.
	CA string
	// Cert and Key are a PEM client certificate and key for mutual TLS.
	// Both or neither.
	Cert, Key string
	// SAN is the name the server's certificate must carry. Empty means
	// the host of the server address.
	SAN string
}

// ClientTLS returns the client TLS configuration f describes. The server's
// certificate is always verified.
func ClientTLS(f TLSFiles) (*tls.Config, error) {
	cfg, err := tlsfiles.ClientConfig(tlsfiles.ClientOptions{CAFile: f.CA, CertFile: f.Cert, KeyFile: f.Key, ServerName: f.SAN})
	if caErr, ok := errors.AsType[*tlsfiles.CAError](err); ok {
		if errors.Is(caErr.Err, tlsfiles.ErrNoCA) {
			return nil, fmt.Errorf("xds: %s holds no PEM certificate", f.CA)
		}
		return nil, fmt.Errorf("xds: reading the CA: %w", caErr.Err)
	}
	if certErr, ok := errors.AsType[*tlsfiles.CertError](err); ok {
		if errors.Is(certErr.Err, tlsfiles.ErrCertWithoutKey) {
			return nil, errors.New("xds: a client certificate needs both a certificate and a key file")
		}
		return nil, fmt.Errorf("xds: loading the client certificate: %w", certErr.Err)
	}
	return cfg, err
}
