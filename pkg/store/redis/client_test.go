package redis_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tollgatehq/tollgate/internal/redistest"
	"github.com/tollgatehq/tollgate/pkg/algorithm"
	"github.com/tollgatehq/tollgate/pkg/store"
	"github.com/tollgatehq/tollgate/pkg/store/redis"
)

// secret is the password of every test; no output may contain it.
const secret = "s3cr3t-Pa55"

func TestClientConfigValidate(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.pem")
	tests := []struct {
		name string
		cfg  redis.ClientConfig
		want string // "" for valid
	}{
		{"single", redis.ClientConfig{Addrs: []string{"localhost:6379"}}, ""},
		{"single by name", redis.ClientConfig{Type: "single", Addrs: []string{"10.0.0.1:6379"}, DB: 3, Password: secret}, ""},
		{"url", redis.ClientConfig{Addrs: []string{"rediss://app:" + secret + "@redis.example:6380/2"}}, ""},
		{"sentinel", redis.ClientConfig{Type: "sentinel", Addrs: []string{"s1:26379", "s2:26379"}, MasterName: "mymaster"}, ""},
		{"cluster", redis.ClientConfig{Type: "Cluster", Addrs: []string{"n1:6379", "n2:6379"}}, ""},
		{"unknown type", redis.ClientConfig{Type: "ring", Addrs: []string{"a:1"}},
			`unknown redis type "ring" (want single, sentinel or cluster)`},
		{"no address", redis.ClientConfig{}, "no redis address"},
		{"single with two", redis.ClientConfig{Addrs: []string{"a:1", "b:2"}},
			"redis type single takes one address, got 2 (sentinel and cluster take several)"},
		{"no port", redis.ClientConfig{Addrs: []string{"localhost"}}, `redis address "localhost": want host:port`},
		{"bad port", redis.ClientConfig{Addrs: []string{"localhost:0"}}, `redis address "localhost:0": bad port "0"`},
		{"no host", redis.ClientConfig{Addrs: []string{":6379"}}, `redis address ":6379": no host`},
		{"bad scheme", redis.ClientConfig{Addrs: []string{"http://u:" + secret + "@h:1"}},
			"redis address http://u:[redacted]@h:1: want host:port or a redis:// or rediss:// URL"},
		{"bad url", redis.ClientConfig{Addrs: []string{"redis://u:" + secret + "@h:1/x"}},
			"redis address redis://u:[redacted]@h:1/x: invalid URL"},
		{"url for cluster", redis.ClientConfig{Type: "cluster", Addrs: []string{"redis://:" + secret + "@h:1"}},
			"redis address redis://:[redacted]@h:1: a URL is only accepted for type single"},
		{"password twice", redis.ClientConfig{Addrs: []string{"redis://:" + secret + "@h:1"}, Password: secret},
			"redis address redis://:[redacted]@h:1: a password is given both in the URL and in the settings"},
		{"sentinel without master", redis.ClientConfig{Type: "sentinel", Addrs: []string{"s:1"}},
			"redis type sentinel needs a master name"},
		{"master name without sentinel", redis.ClientConfig{Addrs: []string{"s:1"}, MasterName: "m"},
			`redis master name "m" is only used with type sentinel`},
		{"cluster db", redis.ClientConfig{Type: "cluster", Addrs: []string{"n:1"}, DB: 1},
			"redis db 1: a cluster has only db 0"},
		{"negative db", redis.ClientConfig{Addrs: []string{"n:1"}, DB: -1}, "redis db -1 is negative"},
		{"negative pool", redis.ClientConfig{Addrs: []string{"n:1"}, PoolSize: -1}, "redis pool size -1 is negative"},
		{"negative timeout", redis.ClientConfig{Addrs: []string{"n:1"}, ReadTimeout: -time.Second}, "redis read timeout -1s is negative"},
		{"tls files without tls", redis.ClientConfig{Addrs: []string{"n:1"}, CAFile: notPEM},
			"redis TLS files or server name given, but TLS is off"},
		{"ca not pem", redis.ClientConfig{Addrs: []string{"n:1"}, TLS: true, CAFile: notPEM},
			"redis TLS CA " + notPEM + ": no PEM certificate found"},
		{"ca missing", redis.ClientConfig{Addrs: []string{"n:1"}, TLS: true, CAFile: missing},
			"redis TLS CA: open " + missing + ": no such file or directory"},
		{"cert without key", redis.ClientConfig{Addrs: []string{"n:1"}, TLS: true, CertFile: notPEM},
			"redis TLS client certificate and key go together: give both or neither"},
		{"ca and cert", redis.ClientConfig{Addrs: []string{"n:1"}, TLS: true, CAFile: notPEM, KeyFile: notPEM},
			"redis TLS CA " + notPEM + ": no PEM certificate found\nredis TLS client certificate and key go together: give both or neither"},
		{"several problems", redis.ClientConfig{Type: "cluster", DB: 2, Password: secret},
			"no redis address\nredis db 2: a cluster has only db 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			got := ""
			if err != nil {
				got = err.Error()
			}
			if got != tt.want {
				t.Fatalf("Validate:\n got  %s\n want %s", got, tt.want)
			}
			_, err = redis.NewClient(tt.cfg)
			if (err == nil) != (tt.want == "") {
				t.Fatalf("NewClient: %v, want an error iff Validate fails", err)
			}
			if err != nil && strings.Contains(err.Error(), secret) {
				t.Fatalf("NewClient error shows the password: %v", err)
			}
		})
	}
}

// TestClientConfigRedacts checks every way a ClientConfig is printed.
func TestClientConfigRedacts(t *testing.T) {
	cfgs := []redis.ClientConfig{
		{Addrs: []string{"h:6379"}, Username: "app", Password: secret, TLS: true},
		{Addrs: []string{"redis://app:" + secret + "@h:6379/1"}},
		{Addrs: []string{"redis://app:" + strings.ReplaceAll(secret, "-", "%2D") + "@h:6379/1"}},
	}
	for _, cfg := range cfgs {
		var logged bytes.Buffer
		slog.New(slog.NewJSONHandler(&logged, nil)).Info("redis", "redis", cfg)
		slog.New(slog.NewTextHandler(&logged, nil)).Info("redis", "redis", cfg)
		for _, out := range []string{cfg.String(), fmt.Sprint(cfg), fmt.Sprintf("%+v", cfg), fmt.Sprintf("%#v", cfg), logged.String()} {
			if strings.Contains(out, secret) || strings.Contains(out, "%2D") {
				t.Errorf("output shows the password: %s", out)
			}
			if !strings.Contains(out, "[redacted]") {
				t.Errorf("output does not say a password is set: %s", out)
			}
		}
	}
	if got, want := cfgs[0].String(), "redis single h:6379 db=0 user=app password=[redacted] tls"; got != want {
		t.Errorf("String = %q, want %q", got, want)
	}
}

// TestNewClient connects to each kind of deployment through NewClient and
// decides a hit through a Store on it.
func TestNewClient(t *testing.T) {
	plain := redistest.StartStandalone(t)
	protected := redistest.StartStandalone(t, redistest.WithPassword(secret))
	cl := redistest.StartCluster(t)
	sentinel := redistest.StartSentinel(t)
	tests := []struct {
		name string
		cfg  redis.ClientConfig
		want string // the client's type
	}{
		{"single", redis.ClientConfig{Addrs: []string{plain.Addr}}, "*redis.Client"},
		{"password", redis.ClientConfig{Addrs: []string{protected.Addr}, Password: secret}, "*redis.Client"},
		{"url", redis.ClientConfig{Addrs: []string{"redis://:" + secret + "@" + protected.Addr + "/2"}}, "*redis.Client"},
		{"cluster", redis.ClientConfig{Type: "cluster", Addrs: cl.Addrs()}, "*redis.ClusterClient"},
		{"sentinel", redis.ClientConfig{Type: "sentinel", Addrs: sentinel.Addrs(), MasterName: sentinel.MasterName}, "*redis.Client"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client, err := redis.NewClient(tt.cfg)
			if err != nil {
				t.Fatalf("NewClient: %v", err)
			}
			t.Cleanup(func() { _ = client.Close() })
			if got := fmt.Sprintf("%T", client); got != tt.want {
				t.Errorf("client is a %s, want %s", got, tt.want)
			}
			s := newStore(t, redis.Options{Client: client})
			l := limit(algorithm.FixedWindow, 2, time.Minute)
			v := apply(t, s, hit("a", l, 1), hit("b", l, 2))
			if !v[0].Allowed || v[0].Remaining != 1 || !v[1].Allowed || v[1].Remaining != 0 {
				t.Fatalf("verdicts %+v", v)
			}
		})
	}
	t.Run("sentinel master", func(t *testing.T) {
		// The sentinel client writes to the master, never the replica.
		client, err := redis.NewClient(redis.ClientConfig{Type: "sentinel", Addrs: sentinel.Addrs(), MasterName: sentinel.MasterName})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = client.Close() })
		info := client.Info(context.Background(), "server").Val()
		if want := "tcp_port:" + portOf(t, sentinel.Master.Addr); !strings.Contains(info, want) {
			t.Fatalf("the sentinel client reached a server without %q", want)
		}
	})
	t.Run("wrong password", func(t *testing.T) {
		client, err := redis.NewClient(redis.ClientConfig{Addrs: []string{protected.Addr}, Password: "not-" + secret})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = client.Close() })
		s := newStore(t, redis.Options{Client: client})
		v := make([]algorithm.Verdict, 1)
		err = s.Apply(context.Background(), []store.Hit{hit("a", limit(algorithm.FixedWindow, 1, time.Minute), 1)}, v)
		if err == nil || strings.Contains(err.Error(), secret) {
			t.Fatalf("Apply = %v, want an error without the password", err)
		}
	})
}

func portOf(t *testing.T, addr string) string {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// TestNewClientTLS runs a server that requires TLS with client
// certificates and connects with the files NewClient reads.
func TestNewClientTLS(t *testing.T) {
	dir := t.TempDir()
	files := writeTLSFiles(t, dir)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	redistest.StartStandalone(t, redistest.WithArgs(
		"--tls-port", strconv.Itoa(port),
		"--tls-cert-file", files["server.crt"],
		"--tls-key-file", files["server.key"],
		"--tls-ca-cert-file", files["ca.crt"],
		"--tls-auth-clients", "yes",
	))
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	client, err := redis.NewClient(redis.ClientConfig{
		Addrs: []string{addr}, TLS: true, CAFile: files["ca.crt"],
		CertFile: files["client.crt"], KeyFile: files["client.key"], ServerName: "redis.test",
	})
	if err != nil {
		t.Fatalf("NewClient: %v", err)
	}
	t.Cleanup(func() { _ = client.Close() })
	s := newStore(t, redis.Options{Client: client})
	if v := apply(t, s, hit("tls", limit(algorithm.TokenBucket, 5, time.Second), 1)); !v[0].Allowed {
		t.Fatalf("verdict %+v", v[0])
	}

	// Without the client certificate the server refuses.
	bare, err := redis.NewClient(redis.ClientConfig{Addrs: []string{addr}, TLS: true, CAFile: files["ca.crt"], ServerName: "redis.test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bare.Close() })
	if err := bare.Ping(context.Background()).Err(); err == nil {
		t.Fatal("PING without a client certificate succeeded")
	}
}

// writeTLSFiles writes a CA, a server certificate for redis.test and a
// client certificate, and returns their paths by name.
func writeTLSFiles(t *testing.T, dir string) map[string]string {
	t.Helper()
	paths := map[string]string{}
	write := func(name, typ string, der []byte) {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		paths[name] = path
	}
	newKey := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	caKey := newKey()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "tollgate test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	write("ca.crt", "CERTIFICATE", caDER)
	for i, name := range []string{"server", "client"} {
		key := newKey()
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(int64(2 + i)), Subject: pkix.Name{CommonName: name},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			DNSNames:    []string{"redis.test"},
			KeyUsage:    x509.KeyUsageDigitalSignature,
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		write(name+".crt", "CERTIFICATE", der)
		keyDER, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			t.Fatal(err)
		}
		write(name+".key", "EC PRIVATE KEY", keyDER)
	}
	return paths
}

var _ goredis.UniversalClient = (*goredis.Client)(nil)
