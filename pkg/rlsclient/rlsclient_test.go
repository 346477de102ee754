package rlsclient

import (
	"context"
	"net"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/tollgatehq/tollgate/pkg/descriptor"
	"github.com/tollgatehq/tollgate/pkg/tlsfiles/tlsfilestest"
)

func TestParseDescriptor(t *testing.T) {
	tests := []struct {
		in      string
		want    []descriptor.Entry
		wantErr string
	}{
		{in: "api_key=k1", want: []descriptor.Entry{{Key: "api_key", Value: "k1"}}},
		{in: "a=1,b=x=y", want: []descriptor.Entry{{Key: "a", Value: "1"}, {Key: "b", Value: "x=y"}}},
		{in: "a=", want: []descriptor.Entry{{Key: "a", Value: ""}}},
		{in: "", wantErr: "empty descriptor"},
		{in: "a", wantErr: `entry "a" is not key=value`},
		{in: "a=1,=2", wantErr: `entry "=2" is not key=value`},
		{in: "a=1,", wantErr: `entry "" is not key=value`},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseDescriptor(tt.in)
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("ParseDescriptor(%q) error = %v, want %q", tt.in, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseDescriptor(%q): %v", tt.in, err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("ParseDescriptor(%q) = %v, want %v", tt.in, got, tt.want)
			}
		})
	}
}

func TestWaitReady(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	defer func() {
		srv.Stop()
		<-served
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	c, err := Dial(lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.WaitReady(ctx); err != nil {
		t.Errorf("WaitReady on a listening server: %v", err)
	}

	// A port that was just freed refuses connections.
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := closed.Addr().String()
	closed.Close()
	bad, err := Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close()
	err = bad.WaitReady(ctx)
	if err == nil || !strings.Contains(err.Error(), "connecting to "+addr) {
		t.Errorf("WaitReady on a closed port: error = %v, want one naming %s", err, addr)
	}
}

func TestTLSCredentials(t *testing.T) {
	ca := tlsfilestest.NewCA(t, "CA")
	dir := t.TempDir()
	certFile, keyFile := ca.Client(t, tlsfilestest.Names{DNS: []string{"client"}}).Write(t, dir)
	caFile, notPEM := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "not.pem")
	tlsfilestest.WriteFile(t, caFile, ca.PEM)
	tlsfilestest.WriteFile(t, notPEM, []byte("hello\n"))
	for _, tc := range []struct {
		name     string
		tls      TLS
		protocol string
		wantErr  string
	}{
		{name: "zero is plain text", protocol: "insecure"},
		{name: "enabled alone", tls: TLS{Enabled: true}, protocol: "tls"},
		{name: "server name alone", tls: TLS{ServerName: "tollgate"}, protocol: "tls"},
		{name: "everything", tls: TLS{CAFile: caFile, CertFile: certFile, KeyFile: keyFile}, protocol: "tls"},
		{name: "missing CA", tls: TLS{CAFile: "/nonexistent/ca.crt"},
			wantErr: "reading the TLS CA: open /nonexistent/ca.crt: no such file or directory"},
		{name: "CA without certificate", tls: TLS{CAFile: notPEM},
			wantErr: "reading the TLS CA: no PEM certificate in " + notPEM},
		{name: "certificate without key", tls: TLS{CertFile: certFile},
			wantErr: "a TLS client certificate needs both a certificate and a key file"},
		{name: "key that is no key", tls: TLS{CertFile: certFile, KeyFile: notPEM},
			wantErr: "loading the TLS client certificate " + certFile + ": tls: failed to find any PEM data in key input"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			creds, err := tc.tls.Credentials()
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("Credentials: %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := creds.Info().SecurityProtocol; got != tc.protocol {
				t.Errorf("security protocol %q, want %q", got, tc.protocol)
			}
		})
	}
}
