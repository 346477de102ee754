package integration

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/tollgatehq/tollgate/internal/logtest"
	"github.com/tollgatehq/tollgate/internal/polltest"
	"github.com/tollgatehq/tollgate/pkg/app"
	"github.com/tollgatehq/tollgate/pkg/cli"
	"github.com/tollgatehq/tollgate/pkg/rlsclient"
	"github.com/tollgatehq/tollgate/pkg/tlsfiles/tlsfilestest"
)

// tlsSetup is a server CA and certificate, a client CA and the files of a
// TLS-serving tollgate, mounted as Kubernetes mounts a Secret.
type tlsSetup struct {
	serverCA, clientCA *tlsfilestest.CA
	server             tlsfilestest.Cert
	mount              *tlsfilestest.SecretDir
	// caFile holds serverCA's certificate, for clients.
	caFile string
}

const tlsServerName = "tollgate.test"

func newTLSSetup(t *testing.T) *tlsSetup {
	t.Helper()
	ts := &tlsSetup{serverCA: tlsfilestest.NewCA(t, "server CA"), clientCA: tlsfilestest.NewCA(t, "client CA")}
	ts.server = ts.serverCA.Server(t, tlsfilestest.Names{DNS: []string{tlsServerName}})
	ts.mount = tlsfilestest.NewSecretDir(t, t.TempDir(), ts.files(ts.server))
	ts.caFile = filepath.Join(t.TempDir(), "server-ca.crt")
	tlsfilestest.WriteFile(t, ts.caFile, ts.serverCA.PEM)
	return ts
}

// files are the Secret's files with cert as the server certificate.
func (ts *tlsSetup) files(cert tlsfilestest.Cert) map[string][]byte {
	return map[string][]byte{"tls.crt": cert.CertPEM, "tls.key": cert.KeyPEM, "ca.crt": ts.clientCA.PEM}
}

// settings serve gRPC over TLS from the mount, asking for client
// certificates signed by the client CA when mutual, with san if not empty.
func (ts *tlsSetup) settings(mutual bool, san string) func(*app.Settings) {
	return func(s *app.Settings) {
		s.GRPCTLS.Cert, s.GRPCTLS.Key = filepath.Join(ts.mount.Dir, "tls.crt"), filepath.Join(ts.mount.Dir, "tls.key")
		if mutual {
			s.GRPCTLS.ClientCA, s.GRPCTLS.ClientSAN = filepath.Join(ts.mount.Dir, "ca.crt"), san
		}
	}
}

// clientFiles writes a client certificate and key and returns the client
// TLS settings that present them.
func (ts *tlsSetup) clientFiles(t *testing.T, cert tlsfilestest.Cert) rlsclient.TLS {
	t.Helper()
	certFile, keyFile := cert.Write(t, t.TempDir())
	return rlsclient.TLS{CAFile: ts.caFile, ServerName: tlsServerName, CertFile: certFile, KeyFile: keyFile}
}

// checkHealth makes one gRPC health check on a new connection dialed as c
// says and returns its error.
func checkHealth(t *testing.T, addr string, c rlsclient.TLS) error {
	t.Helper()
	client, err := rlsclient.DialTLS(addr, c)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = healthpb.NewHealthClient(client.Conn()).Check(ctx, &healthpb.HealthCheckRequest{})
	return err
}

// servedSerial makes a new TLS connection to addr and returns the serial of
// the certificate the server presents.
func (ts *tlsSetup) servedSerial(t *testing.T, addr string) *big.Int {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ts.serverCA.PEM)
	d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: 5 * time.Second}, Config: &tls.Config{
		RootCAs: pool, ServerName: tlsServerName, NextProtos: []string{"h2"}, MinVersion: tls.VersionTLS12,
	}}
	conn, err := d.DialContext(context.Background(), "tcp", addr)
	if err != nil {
		t.Fatalf("TLS handshake: %v", err)
	}
	defer conn.Close()
	return conn.(*tls.Conn).ConnectionState().PeerCertificates[0].SerialNumber
}

func TestTLSServer(t *testing.T) {
	ts := newTLSSetup(t)
	svc := startService(t, map[string]string{"api.yaml": searchRules}, ts.settings(false, ""))
	serverOnly := rlsclient.TLS{CAFile: ts.caFile, ServerName: tlsServerName}

	if err := checkHealth(t, svc.grpcAddr, rlsclient.TLS{}); status.Code(err) != codes.Unavailable {
		t.Errorf("plain-text client: %v, want Unavailable", err)
	}
	if err := checkHealth(t, svc.grpcAddr, rlsclient.TLS{Enabled: true, ServerName: tlsServerName}); status.Code(err) != codes.Unavailable ||
		!strings.Contains(err.Error(), "certificate signed by unknown authority") {
		t.Errorf("client trusting the system roots only: %v, want Unavailable for an unknown authority", err)
	}
	if err := checkHealth(t, svc.grpcAddr, serverOnly); err != nil {
		t.Errorf("TLS client: %v", err)
	}
	if err := checkHealth(t, svc.grpcAddr, rlsclient.TLS{CAFile: ts.caFile, ServerName: "other.test"}); status.Code(err) != codes.Unavailable {
		t.Errorf("client expecting another server name: %v, want Unavailable", err)
	}

	tlsArgs := []string{"--addr", svc.grpcAddr, "--tls-ca", ts.caFile, "--tls-server-name", tlsServerName}
	for _, tc := range []struct {
		name     string
		args     []string
		wantCode int
		want     string // in stdout when wantCode is 0, else in stderr
	}{
		{"query over TLS", append([]string{"query", "--domain", "api", "--descriptor", "api_key=k,endpoint=/search"}, tlsArgs...),
			0, "overall: OK\ndescriptor 0: OK, limit 3 per minute (search), remaining 2"},
		{"health over TLS", append([]string{"health"}, tlsArgs...), 0, ": SERVING"},
		{"health in plain text", []string{"health", "--addr", svc.grpcAddr, "--timeout", "1s"}, 1, "tollgate health: checking " + svc.grpcAddr},
		{"health with a missing CA file", []string{"health", "--addr", svc.grpcAddr, "--tls-ca", "/nonexistent/ca.crt"}, 1,
			"reading the TLS CA: open /nonexistent/ca.crt: no such file or directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := cli.MainEnv(context.Background(), tc.args, &stdout, &stderr, os.Getenv)
			out := stdout.String()
			if tc.wantCode != 0 {
				out = stderr.String()
			}
			if code != tc.wantCode || !strings.Contains(out, tc.want) {
				t.Fatalf("exit %d, want %d with %q in the output\nstdout: %s\nstderr: %s", code, tc.wantCode, tc.want, stdout.String(), stderr.String())
			}
		})
	}
}

func TestTLSClientCertificates(t *testing.T) {
	ts := newTLSSetup(t)
	const san = "envoy.gateway.svc"
	otherCA := tlsfilestest.NewCA(t, "other CA")
	envoy := ts.clientFiles(t, ts.clientCA.Client(t, tlsfilestest.Names{DNS: []string{san}}))
	for _, tc := range []struct {
		name   string
		san    string
		client rlsclient.TLS
		ok     bool
	}{
		{"no client certificate", "", rlsclient.TLS{CAFile: ts.caFile, ServerName: tlsServerName}, false},
		{"certificate of the client CA", "", envoy, true},
		{"certificate of another CA", "", ts.clientFiles(t, otherCA.Client(t, tlsfilestest.Names{DNS: []string{san}})), false},
		{"the required SAN", san, envoy, true},
		{"a wrong SAN", san, ts.clientFiles(t, ts.clientCA.Client(t, tlsfilestest.Names{DNS: []string{"intruder.svc"}})), false},
		{"the required SAN from another CA", san, ts.clientFiles(t, otherCA.Client(t, tlsfilestest.Names{DNS: []string{san}})), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			svc := startService(t, map[string]string{"api.yaml": searchRules}, ts.settings(true, tc.san))
			err := checkHealth(t, svc.grpcAddr, tc.client)
			if tc.ok && err != nil {
				t.Fatalf("refused: %v", err)
			}
			if !tc.ok && status.Code(err) != codes.Unavailable {
				t.Fatalf("health check: %v, want Unavailable", err)
			}
		})
	}

	t.Run("health command with a client certificate", func(t *testing.T) {
		svc := startService(t, map[string]string{"api.yaml": searchRules}, ts.settings(true, san))
		var stdout, stderr bytes.Buffer
		args := []string{"health", "--addr", svc.grpcAddr, "--tls-ca", envoy.CAFile, "--tls-server-name", tlsServerName,
			"--tls-cert", envoy.CertFile, "--tls-key", envoy.KeyFile}
		if code := cli.MainEnv(context.Background(), args, &stdout, &stderr, os.Getenv); code != 0 {
			t.Fatalf("exit %d: %s", code, stderr.String())
		}
	})
}

// TestTLSRotation replaces the certificate of a live tollgate as
// cert-manager does (a "..data" swap) and by rewriting a file in place, and
// checks that new connections get the new certificate without a restart
// and that a broken replacement leaves the last good one served.
func TestTLSRotation(t *testing.T) {
	ts := newTLSSetup(t)
	var logs logtest.Buffer
	svc := startServiceLogging(t, t.TempDir(), &logs, ts.settings(false, ""))
	client := rlsclient.TLS{CAFile: ts.caFile, ServerName: tlsServerName}
	second, third := ts.serverCA.Server(t, tlsfilestest.Names{DNS: []string{tlsServerName}}),
		ts.serverCA.Server(t, tlsfilestest.Names{DNS: []string{tlsServerName}})

	serves := func(step string, want *big.Int) {
		t.Helper()
		polltest.EventuallyEvery(t, 10*time.Second, pollEvery, func() bool {
			return ts.servedSerial(t, svc.grpcAddr).Cmp(want) == 0
		}, "%s: the server to present serial %s", step, want.Text(16))
		if err := checkHealth(t, svc.grpcAddr, client); err != nil {
			t.Fatalf("%s: health check over TLS: %v", step, err)
		}
	}
	// keeps checks that several new connections all get want.
	keeps := func(step string, want *big.Int) {
		t.Helper()
		for range 3 {
			if got := ts.servedSerial(t, svc.grpcAddr); got.Cmp(want) != 0 {
				t.Fatalf("%s: served serial %x, want %x", step, got, want)
			}
		}
		if err := checkHealth(t, svc.grpcAddr, client); err != nil {
			t.Fatalf("%s: health check over TLS: %v", step, err)
		}
	}

	serves("start", ts.server.Serial)
	// A long-lived connection, as Envoy keeps, made before the rotation.
	before, err := rlsclient.DialTLS(svc.grpcAddr, client)
	if err != nil {
		t.Fatal(err)
	}
	defer before.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := before.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}

	ts.mount.Update(t, ts.files(second))
	serves("after the ..data swap", second.Serial)

	broken := ts.files(third)
	broken["tls.key"] = second.KeyPEM // the key of another certificate
	ts.mount.Update(t, broken)
	keeps("after a swap to a mismatched key", second.Serial)

	half := ts.files(third)
	half["tls.crt"] = third.CertPEM[:len(third.CertPEM)/2]
	ts.mount.Update(t, half)
	keeps("after a swap to a half-written certificate", second.Serial)

	ts.mount.Update(t, ts.files(third))
	serves("after the repair", third.Serial)

	// In place: through the symlinks, over the files of the live version.
	certFile, keyFile := filepath.Join(ts.mount.Dir, "tls.crt"), filepath.Join(ts.mount.Dir, "tls.key")
	tlsfilestest.WriteFile(t, keyFile, ts.server.KeyPEM)
	keeps("after rewriting the key alone", third.Serial)
	tlsfilestest.WriteFile(t, certFile, ts.server.CertPEM)
	serves("after rewriting the certificate in place", ts.server.Serial)

	if _, err := healthpb.NewHealthClient(before.Conn()).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Errorf("the connection made before the rotations: %v", err)
	}
	out := logs.String()
	if n := strings.Count(out, "TLS files reloaded"); n != 3 {
		t.Errorf("logs show %d reloads, want 3:\n%s", n, out)
	}
	for _, want := range []string{"private key does not match public key", "failed to find any PEM data in certificate input"} {
		if !strings.Contains(out, want) {
			t.Errorf("logs do not show %q:\n%s", want, out)
		}
	}
}
