package tlsfiles_test

import (
	"crypto/tls"
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/tollgatehq/tollgate/pkg/tlsfiles"
	"github.com/tollgatehq/tollgate/pkg/tlsfiles/tlsfilestest"
)

// clientHandshake runs one TLS handshake between srv and a client with cfg
// over an in-memory connection, and returns the client's and the server's
// handshake errors.
func clientHandshake(t *testing.T, srv *tlsfiles.Server, cfg *tls.Config) (clientErr, serverErr error) {
	t.Helper()
	c, s := net.Pipe()
	defer c.Close()
	defer s.Close()
	var wg sync.WaitGroup
	wg.Go(func() {
		serverErr = tls.Server(s, srv.TLSConfig()).Handshake()
		s.Close() // release a client waiting for the server's last flight
	})
	conn := tls.Client(c, cfg)
	clientErr = conn.Handshake()
	if clientErr == nil {
		// TLS 1.3: the server checks the client's certificate after the
		// client's handshake returns; a read sees its verdict.
		_, _ = conn.Read(make([]byte, 1))
	}
	c.Close()
	wg.Wait()
	return clientErr, serverErr
}

func TestClientConfig(t *testing.T) {
	ca := tlsfilestest.NewCA(t, "server CA")
	clientCA := tlsfilestest.NewCA(t, "client CA")
	dir := t.TempDir()
	srvDir, cliDir := filepath.Join(dir, "server"), filepath.Join(dir, "client")
	for _, d := range []string{srvDir, cliDir} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	srvCert, srvKey := ca.Server(t, serverNames).Write(t, srvDir)
	certFile, keyFile := clientCA.Client(t, tlsfilestest.Names{DNS: []string{"envoy"}}).Write(t, cliDir)
	caFile, clientCAFile := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "client-ca.crt")
	tlsfilestest.WriteFile(t, caFile, ca.PEM)
	tlsfilestest.WriteFile(t, clientCAFile, clientCA.PEM)
	mutual, err := tlsfiles.New(tlsfiles.Options{CertFile: srvCert, KeyFile: srvKey, ClientCAFile: clientCAFile})
	if err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name       string
		opts       tlsfiles.ClientOptions
		clientFail bool // the client refuses the server
		serverFail bool // the server refuses the client
	}{
		{name: "CA and client certificate", opts: tlsfiles.ClientOptions{CAFile: caFile, CertFile: certFile, KeyFile: keyFile, ServerName: "tollgate.test"}},
		{name: "no client certificate", opts: tlsfiles.ClientOptions{CAFile: caFile, ServerName: "tollgate.test"}, serverFail: true},
		{name: "server name not in the certificate", opts: tlsfiles.ClientOptions{CAFile: caFile, CertFile: certFile, KeyFile: keyFile, ServerName: "other.test"}, clientFail: true},
		{name: "system roots", opts: tlsfiles.ClientOptions{CertFile: certFile, KeyFile: keyFile, ServerName: "tollgate.test"}, clientFail: true},
		{name: "another CA", opts: tlsfiles.ClientOptions{CAFile: clientCAFile, ServerName: "tollgate.test"}, clientFail: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := tlsfiles.ClientConfig(tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			if cfg.MinVersion != tls.VersionTLS12 || cfg.InsecureSkipVerify {
				t.Fatalf("MinVersion %x, InsecureSkipVerify %v; want TLS 1.2 and verification", cfg.MinVersion, cfg.InsecureSkipVerify)
			}
			clientErr, serverErr := clientHandshake(t, mutual, cfg)
			if (clientErr != nil) != tc.clientFail {
				t.Errorf("client handshake error = %v, want one: %v", clientErr, tc.clientFail)
			}
			if !tc.clientFail && (serverErr != nil) != tc.serverFail {
				t.Errorf("server handshake error = %v, want one: %v", serverErr, tc.serverFail)
			}
		})
	}
}

func TestClientConfigErrors(t *testing.T) {
	ca := tlsfilestest.NewCA(t, "CA")
	dir := t.TempDir()
	certFile, keyFile := ca.Client(t, serverNames).Write(t, dir)
	notPEM := filepath.Join(dir, "not.pem")
	tlsfilestest.WriteFile(t, notPEM, []byte("hello\n"))
	missing := filepath.Join(dir, "missing.crt")

	for _, tc := range []struct {
		name    string
		opts    tlsfiles.ClientOptions
		want    string
		wantIs  []error // errors.Is the error
		ca      string  // the File of its *CAError, "" for none
		cert    string  // the CertFile of its *CertError, "-" for none
		certErr error   // errors.Is the Err of its *CertError
	}{
		{
			name: "CA missing", opts: tlsfiles.ClientOptions{CAFile: missing},
			want:   "tlsfiles: open " + missing + ": no such file or directory",
			wantIs: []error{fs.ErrNotExist}, ca: missing, cert: "-",
		},
		{
			name: "CA not PEM", opts: tlsfiles.ClientOptions{CAFile: notPEM},
			want:   "tlsfiles: loading " + notPEM + ": no PEM certificate in the CA file",
			wantIs: []error{tlsfiles.ErrNoCA}, ca: notPEM, cert: "-",
		},
		{
			name: "certificate without key", opts: tlsfiles.ClientOptions{CertFile: certFile},
			want:   "tlsfiles: a client certificate needs both a certificate and a key file",
			wantIs: []error{tlsfiles.ErrCertWithoutKey}, cert: certFile, certErr: tlsfiles.ErrCertWithoutKey,
		},
		{
			name: "key without certificate", opts: tlsfiles.ClientOptions{KeyFile: keyFile},
			want:   "tlsfiles: a client certificate needs both a certificate and a key file",
			wantIs: []error{tlsfiles.ErrCertWithoutKey}, cert: "", certErr: tlsfiles.ErrCertWithoutKey,
		},
		{
			name: "key that is no key", opts: tlsfiles.ClientOptions{CertFile: certFile, KeyFile: notPEM},
			want: "tlsfiles: loading " + certFile + " and " + notPEM + ": tls: failed to find any PEM data in key input",
			cert: certFile,
		},
		{
			name: "certificate missing", opts: tlsfiles.ClientOptions{CertFile: missing, KeyFile: keyFile},
			want:   "tlsfiles: loading " + missing + " and " + keyFile + ": open " + missing + ": no such file or directory",
			wantIs: []error{fs.ErrNotExist}, cert: missing, certErr: fs.ErrNotExist,
		},
		{
			name: "CA and certificate, CA first", opts: tlsfiles.ClientOptions{CAFile: notPEM, KeyFile: keyFile},
			want: "tlsfiles: loading " + notPEM + ": no PEM certificate in the CA file\n" +
				"tlsfiles: a client certificate needs both a certificate and a key file",
			wantIs: []error{tlsfiles.ErrNoCA, tlsfiles.ErrCertWithoutKey}, ca: notPEM, cert: "", certErr: tlsfiles.ErrCertWithoutKey,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := tlsfiles.ClientConfig(tc.opts)
			if err == nil || cfg != nil {
				t.Fatalf("ClientConfig() = %v, %v; want nil and an error", cfg, err)
			}
			if err.Error() != tc.want {
				t.Errorf("error:\n got  %s\n want %s", err, tc.want)
			}
			for _, target := range tc.wantIs {
				if !errors.Is(err, target) {
					t.Errorf("error %v is not %v", err, target)
				}
			}
			caErr, ok := errors.AsType[*tlsfiles.CAError](err)
			switch {
			case !ok && tc.ca != "":
				t.Errorf("no *CAError in %v", err)
			case ok && caErr.File != tc.ca:
				t.Errorf("CAError.File = %q, want %q", caErr.File, tc.ca)
			}
			certErr, ok := errors.AsType[*tlsfiles.CertError](err)
			switch {
			case !ok && tc.cert != "-":
				t.Errorf("no *CertError in %v", err)
			case ok && tc.cert == "-":
				t.Errorf("*CertError %v, want none", certErr)
			case ok && certErr.CertFile != tc.cert:
				t.Errorf("CertError.CertFile = %q, want %q", certErr.CertFile, tc.cert)
			case ok && tc.certErr != nil && !errors.Is(certErr.Err, tc.certErr):
				t.Errorf("CertError.Err = %v, want %v", certErr.Err, tc.certErr)
			}
		})
	}
}

func TestClientConfigZero(t *testing.T) {
	cfg, err := tlsfiles.ClientConfig(tlsfiles.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.RootCAs != nil || len(cfg.Certificates) != 0 || cfg.ServerName != "" || cfg.MinVersion != tls.VersionTLS12 {
		t.Errorf("ClientConfig(zero) = %+v; want the system roots, no certificate, no server name, TLS 1.2", cfg)
	}
}
