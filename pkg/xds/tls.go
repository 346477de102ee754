package xds

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
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
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: f.SAN}
	if f.CA != "" {
		pem, err := os.ReadFile(f.CA)
		if err != nil {
			return nil, fmt.Errorf("xds: reading the CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("xds: %s holds no PEM certificate", f.CA)
		}
		cfg.RootCAs = pool
	}
	switch {
	case f.Cert != "" && f.Key != "":
		pair, err := tls.LoadX509KeyPair(f.Cert, f.Key)
		if err != nil {
			return nil, fmt.Errorf("xds: loading the client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	case f.Cert != "" || f.Key != "":
		return nil, errors.New("xds: a client certificate needs both a certificate and a key file")
	}
	return cfg, nil
}
