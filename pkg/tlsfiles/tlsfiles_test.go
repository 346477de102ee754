package tlsfiles_test

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io/fs"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollgatehq/tollgate/internal/logtest"
	"github.com/tollgatehq/tollgate/pkg/tlsfiles"
	"github.com/tollgatehq/tollgate/pkg/tlsfiles/tlsfilestest"
)

var serverNames = tlsfilestest.Names{DNS: []string{"tollgate.test"}}

// handshake runs one TLS handshake between srv and a client with cfg over
// an in-memory connection. It returns the serial of the certificate the
// server presented and the server's handshake error.
func handshake(t *testing.T, srv *tlsfiles.Server, cfg *tls.Config) (*big.Int, error) {
	t.Helper()
	c, s := net.Pipe()
	defer c.Close()
	defer s.Close()
	var serverErr error
	var wg sync.WaitGroup
	wg.Go(func() {
		conn := tls.Server(s, srv.TLSConfig())
		serverErr = conn.Handshake()
		// Release a client waiting for the server's last flight.
		s.Close()
	})
	conn := tls.Client(c, cfg)
	clientErr := conn.Handshake()
	var serial *big.Int
	if certs := conn.ConnectionState().PeerCertificates; len(certs) > 0 {
		serial = certs[0].SerialNumber
	}
	if clientErr == nil {
		// TLS 1.3: the server checks the client's certificate after the
		// client's handshake returns; a read sees its verdict.
		_, _ = conn.Read(make([]byte, 1))
	}
	c.Close()
	wg.Wait()
	return serial, serverErr
}

func clientConfig(ca *tlsfilestest.CA, cert *tlsfilestest.Cert) *tls.Config {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.PEM)
	cfg := &tls.Config{RootCAs: pool, ServerName: "tollgate.test", MinVersion: tls.VersionTLS12}
	if cert != nil {
		pair, err := tls.X509KeyPair(cert.CertPEM, cert.KeyPEM)
		if err != nil {
			panic(err)
		}
		// Sent whoever the server names as acceptable issuers.
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &pair, nil }
	}
	return cfg
}

func TestClientAuth(t *testing.T) {
	ca := tlsfilestest.NewCA(t, "server CA")
	clientCA := tlsfilestest.NewCA(t, "client CA")
	otherCA := tlsfilestest.NewCA(t, "other CA")
	dir := t.TempDir()
	certFile, keyFile := ca.Server(t, serverNames).Write(t, dir)
	caFile := filepath.Join(dir, "client-ca.crt")
	tlsfilestest.WriteFile(t, caFile, clientCA.PEM)

	envoy := clientCA.Client(t, tlsfilestest.Names{DNS: []string{"envoy.gateway.svc"}})
	spiffe := clientCA.Client(t, tlsfilestest.Names{URIs: []string{"spiffe://cluster.local/ns/gw/sa/envoy"}})
	byIP := clientCA.Client(t, tlsfilestest.Names{IPs: []net.IP{net.IPv4(10, 0, 0, 7)}})
	stranger := otherCA.Client(t, tlsfilestest.Names{DNS: []string{"envoy.gateway.svc"}})

	for _, tc := range []struct {
		name      string
		ca, san   string
		cert      *tlsfilestest.Cert
		wantErr   error  // errors.Is the server's handshake error
		wantInErr string // or a part of its text
	}{
		{name: "no client CA, no client certificate", cert: nil},
		{name: "no client CA ignores a client certificate", cert: &stranger},
		{name: "client CA, no client certificate", ca: caFile, wantInErr: "client didn't provide a certificate"},
		{name: "client CA, signed by it", ca: caFile, cert: &envoy},
		{name: "client CA, signed by another CA", ca: caFile, cert: &stranger, wantInErr: "unknown authority"},
		{name: "SAN as DNS name", ca: caFile, san: "envoy.gateway.svc", cert: &envoy},
		{name: "SAN as wildcard certificate match", ca: caFile, san: "envoy.gateway.svc", cert: ptr(clientCA.Client(t, tlsfilestest.Names{DNS: []string{"*.gateway.svc"}}))},
		{name: "SAN as URI", ca: caFile, san: "spiffe://cluster.local/ns/gw/sa/envoy", cert: &spiffe},
		{name: "SAN as IP", ca: caFile, san: "10.0.0.7", cert: &byIP},
		{name: "wrong DNS SAN", ca: caFile, san: "other.gateway.svc", cert: &envoy, wantErr: tlsfiles.ErrClientSAN},
		{name: "wrong URI SAN", ca: caFile, san: "spiffe://cluster.local/ns/gw/sa/other", cert: &spiffe, wantErr: tlsfiles.ErrClientSAN},
		{name: "SAN from another CA", ca: caFile, san: "envoy.gateway.svc", cert: &stranger, wantInErr: "unknown authority"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, err := tlsfiles.New(tlsfiles.Options{CertFile: certFile, KeyFile: keyFile, ClientCAFile: tc.ca, ClientSAN: tc.san})
			if err != nil {
				t.Fatal(err)
			}
			_, err = handshake(t, srv, clientConfig(ca, tc.cert))
			switch {
			case tc.wantErr != nil:
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("server handshake error = %v, want %v", err, tc.wantErr)
				}
			case tc.wantInErr != "":
				if err == nil || !strings.Contains(err.Error(), tc.wantInErr) {
					t.Fatalf("server handshake error = %v, want one containing %q", err, tc.wantInErr)
				}
			case err != nil:
				t.Fatalf("server handshake error = %v, want none", err)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

func TestNewErrors(t *testing.T) {
	ca := tlsfilestest.NewCA(t, "CA")
	dir := t.TempDir()
	certFile, keyFile := ca.Server(t, serverNames).Write(t, dir)
	otherKey := filepath.Join(dir, "other.key")
	tlsfilestest.WriteFile(t, otherKey, ca.Server(t, serverNames).KeyPEM)
	notPEM := filepath.Join(dir, "not.pem")
	tlsfilestest.WriteFile(t, notPEM, []byte("hello\n"))
	missing := filepath.Join(dir, "missing.crt")

	for _, tc := range []struct {
		name    string
		opts    tlsfiles.Options
		wantErr error
		want    string
	}{
		{name: "no key", opts: tlsfiles.Options{CertFile: certFile},
			want: "tlsfiles: both a certificate file and a key file are required"},
		{name: "SAN without CA", opts: tlsfiles.Options{CertFile: certFile, KeyFile: keyFile, ClientSAN: "envoy"},
			wantErr: tlsfiles.ErrSANWithoutCA, want: "a required client SAN needs a client CA"},
		{name: "missing file", opts: tlsfiles.Options{CertFile: missing, KeyFile: keyFile},
			wantErr: fs.ErrNotExist, want: "tlsfiles: open " + missing + ": no such file or directory"},
		{name: "key of another certificate", opts: tlsfiles.Options{CertFile: certFile, KeyFile: otherKey},
			want: "tlsfiles: loading " + certFile + " and " + otherKey + ": tls: private key does not match public key"},
		{name: "CA file without certificate", opts: tlsfiles.Options{CertFile: certFile, KeyFile: keyFile, ClientCAFile: notPEM},
			wantErr: tlsfiles.ErrNoClientCA, want: "tlsfiles: loading " + notPEM + ": no PEM certificate in the client CA file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tlsfiles.New(tc.opts)
			if err == nil || err.Error() != tc.want {
				t.Fatalf("New: %v, want %q", err, tc.want)
			}
			if tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
				t.Fatalf("New: %v is not %v", err, tc.wantErr)
			}
		})
	}
}

// TestRotation replaces the files under a live Server in the ways
// certificates are replaced and checks which certificate the next
// handshake gets. Every step's handshake follows the change at once: a
// Server reloads on the handshake, so there is nothing to wait for.
func TestRotation(t *testing.T) {
	ca := tlsfilestest.NewCA(t, "CA")
	client := clientConfig(ca, nil)
	first, second, third := ca.Server(t, serverNames), ca.Server(t, serverNames), ca.Server(t, serverNames)

	t.Run("secret mount", func(t *testing.T) {
		var logs logtest.Buffer
		mount := tlsfilestest.NewSecretDir(t, t.TempDir(), map[string][]byte{"tls.crt": first.CertPEM, "tls.key": first.KeyPEM})
		srv, err := tlsfiles.New(tlsfiles.Options{
			CertFile: filepath.Join(mount.Dir, "tls.crt"), KeyFile: filepath.Join(mount.Dir, "tls.key"),
			Logger: slog.New(slog.NewTextHandler(&logs, nil)),
		})
		if err != nil {
			t.Fatal(err)
		}
		steps := []struct {
			name  string
			files map[string][]byte
			want  *big.Int
		}{
			{"unchanged", nil, first.Serial},
			{"rotated", map[string][]byte{"tls.crt": second.CertPEM, "tls.key": second.KeyPEM}, second.Serial},
			{"key of another certificate", map[string][]byte{"tls.crt": third.CertPEM, "tls.key": second.KeyPEM}, second.Serial},
			{"still broken", nil, second.Serial},
			{"truncated certificate", map[string][]byte{"tls.crt": third.CertPEM[:40], "tls.key": third.KeyPEM}, second.Serial},
			{"repaired", map[string][]byte{"tls.crt": third.CertPEM, "tls.key": third.KeyPEM}, third.Serial},
		}
		for _, step := range steps {
			if step.files != nil {
				mount.Update(t, step.files)
			}
			for range 2 {
				serial, err := handshake(t, srv, client)
				if err != nil {
					t.Fatalf("%s: handshake: %v", step.name, err)
				}
				if serial.Cmp(step.want) != 0 {
					t.Fatalf("%s: served serial %x, want %x", step.name, serial, step.want)
				}
			}
		}
		if srv.Leaf().SerialNumber.Cmp(third.Serial) != 0 {
			t.Errorf("Leaf serial %x, want %x", srv.Leaf().SerialNumber, third.Serial)
		}
		out := logs.String()
		for _, want := range []struct {
			text string
			n    int
		}{
			{"TLS files reloaded", 2},
			{"private key does not match public key", 1}, // once, though two handshakes met it
			{"failed to find any PEM data in certificate input", 1},
		} {
			if got := strings.Count(out, want.text); got != want.n {
				t.Errorf("logs show %q %d times, want %d:\n%s", want.text, got, want.n, out)
			}
		}
		for _, key := range [][]byte{first.KeyPEM, second.KeyPEM, third.KeyPEM} {
			if strings.Contains(out, strings.Split(string(key), "\n")[1]) {
				t.Errorf("logs show a private key:\n%s", out)
			}
		}
	})

	t.Run("in-place rewrite", func(t *testing.T) {
		dir := t.TempDir()
		certFile, keyFile := first.Write(t, dir)
		srv, err := tlsfiles.New(tlsfiles.Options{CertFile: certFile, KeyFile: keyFile})
		if err != nil {
			t.Fatal(err)
		}
		for _, step := range []struct {
			name string
			cert tlsfilestest.Cert
		}{{"unchanged", first}, {"second", second}, {"third", third}, {"back to first", first}} {
			// Rewritten within microseconds of each other: the
			// modification times may not differ, the contents do.
			step.cert.Write(t, dir)
			serial, err := handshake(t, srv, client)
			if err != nil {
				t.Fatalf("%s: handshake: %v", step.name, err)
			}
			if serial.Cmp(step.cert.Serial) != 0 {
				t.Fatalf("%s: served serial %x, want %x", step.name, serial, step.cert.Serial)
			}
		}
	})

	t.Run("rewrite that keeps size and modification time", func(t *testing.T) {
		// What a coarse file-system clock makes of two quick rewrites:
		// nothing in the stat tells them apart.
		var same tlsfilestest.Cert
		for range 200 {
			if c := ca.Server(t, serverNames); len(c.CertPEM) == len(first.CertPEM) && len(c.KeyPEM) == len(first.KeyPEM) {
				same = c
				break
			}
		}
		if same.Serial == nil {
			t.Fatal("no certificate of the same size in 200 tries")
		}
		dir := t.TempDir()
		certFile, keyFile := first.Write(t, dir)
		srv, err := tlsfiles.New(tlsfiles.Options{CertFile: certFile, KeyFile: keyFile})
		if err != nil {
			t.Fatal(err)
		}
		if serial, err := handshake(t, srv, client); err != nil || serial.Cmp(first.Serial) != 0 {
			t.Fatalf("first handshake: serial %x, error %v; want serial %x", serial, err, first.Serial)
		}
		stat := func(p string) fs.FileInfo {
			info, err := os.Stat(p)
			if err != nil {
				t.Fatal(err)
			}
			return info
		}
		certInfo, keyInfo := stat(certFile), stat(keyFile)
		same.Write(t, dir)
		for p, info := range map[string]fs.FileInfo{certFile: certInfo, keyFile: keyInfo} {
			if err := os.Chtimes(p, info.ModTime(), info.ModTime()); err != nil {
				t.Fatal(err)
			}
		}
		if serial, err := handshake(t, srv, client); err != nil || serial.Cmp(same.Serial) != 0 {
			t.Fatalf("after the rewrite: serial %x, error %v; want serial %x", serial, err, same.Serial)
		}
	})

	t.Run("client CA", func(t *testing.T) {
		caA, caB := tlsfilestest.NewCA(t, "client CA A"), tlsfilestest.NewCA(t, "client CA B")
		fromA := caA.Client(t, tlsfilestest.Names{DNS: []string{"envoy"}})
		fromB := caB.Client(t, tlsfilestest.Names{DNS: []string{"envoy"}})
		mount := tlsfilestest.NewSecretDir(t, t.TempDir(), map[string][]byte{"tls.crt": first.CertPEM, "tls.key": first.KeyPEM, "ca.crt": caA.PEM})
		srv, err := tlsfiles.New(tlsfiles.Options{
			CertFile: filepath.Join(mount.Dir, "tls.crt"), KeyFile: filepath.Join(mount.Dir, "tls.key"),
			ClientCAFile: filepath.Join(mount.Dir, "ca.crt"),
		})
		if err != nil {
			t.Fatal(err)
		}
		check := func(step string, cert tlsfilestest.Cert, ok bool) {
			t.Helper()
			_, err := handshake(t, srv, clientConfig(ca, &cert))
			if (err == nil) != ok {
				t.Fatalf("%s: server handshake error %v, want success %v", step, err, ok)
			}
		}
		check("A trusted", fromA, true)
		check("B not yet", fromB, false)
		mount.Update(t, map[string][]byte{"tls.crt": first.CertPEM, "tls.key": first.KeyPEM, "ca.crt": caB.PEM})
		check("A no longer", fromA, false)
		check("B trusted", fromB, true)
	})
}

// BenchmarkConfigForClient measures what a handshake pays to learn the
// files are unchanged: the stats.
func BenchmarkConfigForClient(b *testing.B) {
	ca := tlsfilestest.NewCA(b, "CA")
	dir := b.TempDir()
	certFile, keyFile := ca.Server(b, serverNames).Write(b, dir)
	// An hour on, the files' modification times prove them unchanged.
	later := time.Now().Add(time.Hour)
	srv, err := tlsfiles.New(tlsfiles.Options{CertFile: certFile, KeyFile: keyFile, Now: func() time.Time { return later }})
	if err != nil {
		b.Fatal(err)
	}
	get := srv.TLSConfig().GetConfigForClient
	b.ReportAllocs()
	for b.Loop() {
		if _, err := get(nil); err != nil {
			b.Fatal(err)
		}
	}
}
