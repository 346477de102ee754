package xds_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/tollgatehq/tollgate/internal/logtest"
	"github.com/tollgatehq/tollgate/internal/polltest"
	"github.com/tollgatehq/tollgate/pkg/descriptor"
	"github.com/tollgatehq/tollgate/pkg/reload"
	"github.com/tollgatehq/tollgate/pkg/tlsfiles/tlsfilestest"
	"github.com/tollgatehq/tollgate/pkg/xds"
)

// wait bounds every poll here; updates take milliseconds.
const wait = 10 * time.Second

const nodeID = "tollgate-test"

// controlPlane is go-control-plane's own xDS server with a snapshot cache,
// serving on a loopback port, recording what clients send it.
type controlPlane struct {
	t     *testing.T
	cache cachev3.SnapshotCache
	grpc  *grpc.Server
	addr  string
	creds credentials.TransportCredentials

	mu       sync.Mutex
	requests []*discoveryv3.DiscoveryRequest
	headers  []metadata.MD
}

// startControlPlane serves on addr ("127.0.0.1:0" for any port); creds nil
// means plaintext.
func startControlPlane(t *testing.T, addr string, creds credentials.TransportCredentials) *controlPlane {
	t.Helper()
	cp := &controlPlane{t: t, cache: cachev3.NewSnapshotCache(true, cachev3.IDHash{}, nil), creds: creds}
	cp.listen(addr)
	return cp
}

func (cp *controlPlane) listen(addr string) {
	cp.t.Helper()
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		cp.t.Fatal(err)
	}
	cp.addr = lis.Addr().String()
	callbacks := serverv3.CallbackFuncs{
		StreamOpenFunc: func(ctx context.Context, _ int64, _ string) error {
			md, _ := metadata.FromIncomingContext(ctx)
			cp.mu.Lock()
			cp.headers = append(cp.headers, md)
			cp.mu.Unlock()
			return nil
		},
		StreamRequestFunc: func(_ int64, req *discoveryv3.DiscoveryRequest) error {
			cp.mu.Lock()
			cp.requests = append(cp.requests, proto.Clone(req).(*discoveryv3.DiscoveryRequest))
			cp.mu.Unlock()
			return nil
		},
	}
	var opts []grpc.ServerOption
	if cp.creds != nil {
		opts = append(opts, grpc.Creds(cp.creds))
	}
	cp.grpc = grpc.NewServer(opts...)
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(cp.grpc, serverv3.NewServer(cp.t.Context(), cp.cache, callbacks))
	go func() { _ = cp.grpc.Serve(lis) }()
	cp.t.Cleanup(cp.grpc.Stop)
}

// restart stops the server and starts a new one, with a fresh cache, on
// the same address.
func (cp *controlPlane) restart() {
	cp.t.Helper()
	cp.grpc.Stop()
	cp.cache = cachev3.NewSnapshotCache(true, cachev3.IDHash{}, nil)
	cp.listen(cp.addr)
}

// set publishes cfgs as version for the test node.
func (cp *controlPlane) set(version string, cfgs ...*rlsconfv3.RateLimitConfig) {
	cp.t.Helper()
	res := make([]types.Resource, len(cfgs))
	for i, c := range cfgs {
		res[i] = c
	}
	snap, err := cachev3.NewSnapshot(version, map[resourcev3.Type][]types.Resource{resourcev3.RateLimitConfigType: res})
	if err != nil {
		cp.t.Fatal(err)
	}
	if err := cp.cache.SetSnapshot(cp.t.Context(), nodeID, snap); err != nil {
		cp.t.Fatal(err)
	}
}

// find returns the first request the server received that match accepts,
// or nil.
func (cp *controlPlane) find(match func(*discoveryv3.DiscoveryRequest) bool) *discoveryv3.DiscoveryRequest {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	for _, r := range cp.requests {
		if match(r) {
			return r
		}
	}
	return nil
}

func acked(version string) func(*discoveryv3.DiscoveryRequest) bool {
	return func(r *discoveryv3.DiscoveryRequest) bool {
		return r.GetResponseNonce() != "" && r.GetErrorDetail() == nil && r.GetVersionInfo() == version
	}
}

func nacked(r *discoveryv3.DiscoveryRequest) bool { return r.GetErrorDetail() != nil }

// limitOf returns the requests per unit that rule k=v of domain d has in
// the live tree, or -1.
func limitOf(r *reload.Reloader, d, k, v string) int {
	tree := r.Current()
	if tree == nil || tree.Domain(d) == nil {
		return -1
	}
	rule := tree.Domain(d).Match([]descriptor.Entry{{Key: k, Value: v}})
	if rule == nil || len(rule.Limits) != 1 {
		return -1
	}
	return int(rule.Limits[0].RequestsPerUnit)
}

// runClient runs a client with opts until the test ends.
func runClient(t *testing.T, opts xds.Options) {
	t.Helper()
	c, err := xds.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run() = %v", err)
		}
	})
}

func TestClientFollowsTheServer(t *testing.T) {
	cp := startControlPlane(t, "127.0.0.1:0", nil)
	cp.set("1", perMinute("default/eg/http", "eg", "k", "v", 1))
	rules, err := reload.New(reload.Options{Source: "xds"})
	if err != nil {
		t.Fatal(err)
	}
	runClient(t, xds.Options{
		Rules: rules, Server: cp.addr, NodeID: nodeID,
		NodeMetadata:  map[string]string{"cluster": "eg"},
		Headers:       map[string]string{"x-tenant": "blue"},
		RetryInterval: 10 * time.Millisecond, MaxRetryInterval: 100 * time.Millisecond,
	})

	// The first config arrives and answers.
	polltest.Eventually(t, wait, func() bool { return limitOf(rules, "eg", "k", "v") == 1 }, "the first config never went live")
	polltest.Eventually(t, wait, func() bool { return cp.find(acked("1")) != nil }, "version 1 was never ACKed")
	first := cp.find(func(*discoveryv3.DiscoveryRequest) bool { return true })
	if got := first.GetNode().GetId(); got != nodeID {
		t.Errorf("node id = %q, want %q", got, nodeID)
	}
	if got := first.GetNode().GetMetadata().GetFields()["cluster"].GetStringValue(); got != "eg" {
		t.Errorf("node metadata cluster = %q, want eg", got)
	}
	if got := first.GetTypeUrl(); got != xds.TypeURL {
		t.Errorf("type_url = %q, want %q", got, xds.TypeURL)
	}
	cp.mu.Lock()
	if got := cp.headers[0].Get("x-tenant"); len(got) != 1 || got[0] != "blue" {
		t.Errorf("x-tenant header = %q, want [blue]", got)
	}
	cp.mu.Unlock()

	// An update is live as soon as it is ACKed.
	cp.set("2", perMinute("default/eg/http", "eg", "k", "v", 2))
	polltest.Eventually(t, wait, func() bool { return cp.find(acked("2")) != nil }, "version 2 was never ACKed")
	if got := limitOf(rules, "eg", "k", "v"); got != 2 {
		t.Fatalf("after the ACK of version 2 the limit is %d, want 2", got)
	}

	// A bad update is NACKed with the reason; the old rules answer.
	bad := perMinute("default/eg/http", "eg", "k", "v", 3)
	bad.Descriptors[0].RateLimit.Unit = rlsconfv3.RateLimitUnit_UNKNOWN
	cp.set("3", bad)
	polltest.Eventually(t, wait, func() bool { return cp.find(nacked) != nil }, "version 3 was never NACKed")
	nack := cp.find(nacked)
	const reason = `loading descriptors from xds: xds/default_eg_http.yaml:6: k=v: rate_limit: unknown unit "unknown" (want second, minute, hour, day, week, month or year)`
	if got := nack.GetErrorDetail().GetMessage(); got != reason {
		t.Errorf("NACK error_detail = %q, want %q", got, reason)
	}
	if got := nack.GetVersionInfo(); got != "2" {
		t.Errorf("NACK version_info = %q, want the last ACKed, 2", got)
	}
	if nack.GetResponseNonce() == "" {
		t.Error("NACK has no response_nonce")
	}
	if got := limitOf(rules, "eg", "k", "v"); got != 2 {
		t.Fatalf("after the NACK the limit is %d, want the old 2", got)
	}
	if st := rules.Status(); st.LastError == nil {
		t.Errorf("reload status after the NACK = %+v, want its error", st)
	}

	// The server restarts on the same port with new rules; the client
	// reconnects and takes them.
	cp.restart()
	cp.set("4", perMinute("default/eg/http", "eg", "k", "v", 4))
	polltest.Eventually(t, wait, func() bool { return limitOf(rules, "eg", "k", "v") == 4 }, "the rules after the restart never went live")
	polltest.Eventually(t, wait, func() bool { return cp.find(acked("4")) != nil }, "version 4 was never ACKed")
	// The server offered version 3 again after every NACK; the client
	// refused it from memory, paced, without building it again.
	if st := rules.Status(); st.Failures != 1 || st.LastError != nil {
		t.Errorf("reload status at the end = %+v, want exactly one failure, then success", st)
	}
}

func TestClientTLS(t *testing.T) {
	pki := newPKI(t)
	serverTLS := &tls.Config{
		Certificates: []tls.Certificate{pki.server},
		ClientCAs:    pki.pool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
	}
	for _, tc := range []struct {
		name    string
		files   xds.TLSFiles
		wantErr string // in the client's log; "" means the rules arrive
	}{
		{
			name:  "mutual TLS",
			files: xds.TLSFiles{CA: pki.caFile, Cert: pki.certFile, Key: pki.keyFile, SAN: "xds.test"},
		},
		{
			name:    "wrong SAN",
			files:   xds.TLSFiles{CA: pki.caFile, Cert: pki.certFile, Key: pki.keyFile, SAN: "other.test"},
			wantErr: "x509: certificate is valid for xds.test, not other.test",
		},
		{
			name:    "no client certificate",
			files:   xds.TLSFiles{CA: pki.caFile, SAN: "xds.test"},
			wantErr: "certificate required",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cp := startControlPlane(t, "127.0.0.1:0", credentials.NewTLS(serverTLS))
			cp.set("1", perMinute("r", "eg", "k", "v", 7))
			rules, err := reload.New(reload.Options{Source: "xds"})
			if err != nil {
				t.Fatal(err)
			}
			cfg, err := xds.ClientTLS(tc.files)
			if err != nil {
				t.Fatal(err)
			}
			var log logtest.Buffer
			runClient(t, xds.Options{
				Rules: rules, Server: cp.addr, NodeID: nodeID, TLS: cfg,
				RetryInterval: 10 * time.Millisecond, MaxRetryInterval: 50 * time.Millisecond,
				Logger: slog.New(slog.NewTextHandler(&log, nil)),
			})
			if tc.wantErr == "" {
				polltest.Eventually(t, wait, func() bool { return limitOf(rules, "eg", "k", "v") == 7 }, "the rules never arrived over mTLS")
				return
			}
			polltest.Eventually(t, wait, func() bool { return strings.Contains(log.String(), tc.wantErr) },
				"the client never logged %q; log:\n%s", tc.wantErr, &log)
			if rules.Current() != nil {
				t.Fatal("rules arrived over a connection that should have failed")
			}
			if r := cp.find(acked("1")); r != nil {
				t.Fatal("the server got an ACK over a connection that should have failed")
			}
		})
	}
}

func TestClientTLSFiles(t *testing.T) {
	pki := newPKI(t)
	notPEM := filepath.Join(t.TempDir(), "not.pem")
	if err := os.WriteFile(notPEM, []byte("not pem"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(t.TempDir(), "missing.pem")
	for _, tc := range []struct {
		name  string
		files xds.TLSFiles
		want  string
		is    error
	}{
		{"cert without key", xds.TLSFiles{Cert: pki.certFile}, "xds: a client certificate needs both a certificate and a key file", nil},
		{"CA missing", xds.TLSFiles{CA: missing}, "xds: reading the CA: open " + missing + ": no such file or directory", fs.ErrNotExist},
		{"CA not PEM", xds.TLSFiles{CA: notPEM}, "xds: " + notPEM + " holds no PEM certificate", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := xds.ClientTLS(tc.files)
			if err == nil || err.Error() != tc.want {
				t.Fatalf("ClientTLS() = %v, want %s", err, tc.want)
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Fatalf("ClientTLS() error %v is not %v", err, tc.is)
			}
		})
	}
}

// pki is a CA with a server certificate for xds.test and a client
// certificate, made for one test.
type pki struct {
	pool                      *x509.CertPool
	server                    tls.Certificate
	caFile, certFile, keyFile string
}

func newPKI(t *testing.T) pki {
	t.Helper()
	dir := t.TempDir()
	ca := tlsfilestest.NewCA(t, "tollgate test CA")
	srv := ca.Server(t, tlsfilestest.Names{DNS: []string{"xds.test"}})
	server, err := tls.X509KeyPair(srv.CertPEM, srv.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	p := pki{pool: x509.NewCertPool(), server: server, caFile: filepath.Join(dir, "ca.pem")}
	p.pool.AppendCertsFromPEM(ca.PEM)
	tlsfilestest.WriteFile(t, p.caFile, ca.PEM)
	p.certFile, p.keyFile = ca.Client(t, tlsfilestest.Names{}).Write(t, dir)
	return p
}
