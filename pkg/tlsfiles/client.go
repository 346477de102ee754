package tlsfiles

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"os"
)

var (
	// ErrNoCA reports a client's CA file without any PEM certificate.
	ErrNoCA = errors.New("no PEM certificate in the CA file")
	// ErrCertWithoutKey reports a client certificate file without a key
	// file, or a key file without a certificate file.
	ErrCertWithoutKey = errors.New("a client certificate needs both a certificate and a key file")
)

// ClientOptions name the files of a TLS client. The zero value trusts the
// system roots and presents no certificate.
type ClientOptions struct {
	// CAFile holds the PEM certificates of the CAs that sign the server's
	// certificate. Empty means the system roots.
	CAFile string
	// CertFile and KeyFile are a PEM client certificate and its key, for
	// servers that require one. Both or neither.
	CertFile, KeyFile string
	// ServerName is the name the server's certificate must carry. Empty
	// leaves it to the dialer, which checks the host of the address.
	ServerName string
}

// ClientConfig reads the files o names and returns a client configuration
// that verifies the server's certificate, with TLS 1.2 at least. It reads
// them once: a client that must follow a rotation builds a new
// configuration.
//
// It checks the CA file and the certificate and key alike, and on failure
// returns a *CAError, a *CertError or both joined with errors.Join, the
// CA's first, so that each caller can word the problem in its own terms.
func ClientConfig(o ClientOptions) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: o.ServerName}
	var caErr, certErr error
	if o.CAFile != "" {
		cfg.RootCAs, caErr = loadCA(o.CAFile)
	}
	switch {
	case (o.CertFile == "") != (o.KeyFile == ""):
		certErr = &CertError{CertFile: o.CertFile, KeyFile: o.KeyFile, Err: ErrCertWithoutKey}
	case o.CertFile != "":
		cert, err := tls.LoadX509KeyPair(o.CertFile, o.KeyFile)
		if err != nil {
			// The error names no key material.
			certErr = &CertError{CertFile: o.CertFile, KeyFile: o.KeyFile, Err: err}
		} else {
			cfg.Certificates = []tls.Certificate{cert}
		}
	}
	if caErr != nil || certErr != nil {
		return nil, errors.Join(caErr, certErr)
	}
	return cfg, nil
}

// loadCA returns the pool of the certificates in the PEM file name.
func loadCA(name string) (*x509.CertPool, error) {
	data, err := os.ReadFile(name)
	if err != nil {
		return nil, &CAError{File: name, Err: err}
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return nil, &CAError{File: name, Err: ErrNoCA}
	}
	return pool, nil
}

// CAError reports a client's CA file that did not load. Err is ErrNoCA
// for a file without a PEM certificate, else the error reading it, which
// names the file.
type CAError struct {
	File string
	Err  error
}

// Error names the file and what is wrong with it.
func (e *CAError) Error() string {
	if errors.Is(e.Err, ErrNoCA) {
		return "tlsfiles: loading " + e.File + ": " + e.Err.Error()
	}
	return "tlsfiles: " + e.Err.Error()
}

// Unwrap returns Err.
func (e *CAError) Unwrap() error { return e.Err }

// CertError reports a client certificate and key that did not load. Err is
// ErrCertWithoutKey when only one of the two files is named, else the
// error of tls.LoadX509KeyPair, which names no key material.
type CertError struct {
	CertFile, KeyFile string
	Err               error
}

// Error names the files and what is wrong with them.
func (e *CertError) Error() string {
	if errors.Is(e.Err, ErrCertWithoutKey) {
		return "tlsfiles: " + e.Err.Error()
	}
	return "tlsfiles: loading " + e.CertFile + " and " + e.KeyFile + ": " + e.Err.Error()
}

// Unwrap returns Err.
func (e *CertError) Unwrap() error { return e.Err }
