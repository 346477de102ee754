package app_test

import (
	"net"
	"net/http"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/tollgatehq/tollgate/internal/apptest"
	"github.com/tollgatehq/tollgate/internal/polltest"
	"github.com/tollgatehq/tollgate/pkg/app"
	"github.com/tollgatehq/tollgate/pkg/descriptor"
	"github.com/tollgatehq/tollgate/pkg/rlsclient"
)

// startXDSServer serves go-control-plane's xDS server with a snapshot
// cache on a loopback port until the test ends.
func startXDSServer(t *testing.T) (addr string, cache cachev3.SnapshotCache) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cache = cachev3.NewSnapshotCache(true, cachev3.IDHash{}, nil)
	srv := grpc.NewServer()
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(srv, serverv3.NewServer(t.Context(), cache, nil))
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return lis.Addr().String(), cache
}

// startXDSApp runs an App taking its rules from the xDS server at addr and
// returns its gRPC and HTTP addresses.
func startXDSApp(t *testing.T, addr string, forceStart bool) (grpcAddr, httpAddr string) {
	t.Helper()
	r := apptest.Start(t, "", apptest.Options{Settings: func(s *app.Settings) {
		s.XDS.ConfigType, s.XDS.Server, s.XDS.NodeID, s.XDS.RetryInterval = "xds", addr, "tollgate-app-test", 20*time.Millisecond
		s.XDS.ForceStart = forceStart
	}})
	return r.GRPCAddr, r.HTTPAddr
}

func readyz(t *testing.T, httpAddr string) int {
	t.Helper()
	resp, err := http.Get("http://" + httpAddr + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// grpcHealth returns the gRPC health of the whole server at grpcAddr.
func grpcHealth(t *testing.T, grpcAddr string) healthpb.HealthCheckResponse_ServingStatus {
	t.Helper()
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	resp, err := healthpb.NewHealthClient(conn).Check(t.Context(), &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	return resp.GetStatus()
}

func TestXDSRules(t *testing.T) {
	query := rlsclient.Request{Domain: "eg", Descriptors: [][]descriptor.Entry{{{Key: "k", Value: "v"}}}}
	codes := func(t *testing.T, grpcAddr string, n int) []rlsv3.RateLimitResponse_Code {
		t.Helper()
		client, err := rlsclient.Dial(grpcAddr)
		if err != nil {
			t.Fatal(err)
		}
		defer client.Close()
		var out []rlsv3.RateLimitResponse_Code
		for range n {
			resp, err := client.Query(t.Context(), query)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, resp.GetOverallCode())
		}
		return out
	}
	t.Run("waits for the first config", func(t *testing.T) {
		addr, cache := startXDSServer(t)
		grpcAddr, httpAddr := startXDSApp(t, addr, false)
		if code := readyz(t, httpAddr); code != http.StatusServiceUnavailable {
			t.Fatalf("/readyz before the first config = %d, want 503", code)
		}
		if st := grpcHealth(t, grpcAddr); st != healthpb.HealthCheckResponse_NOT_SERVING {
			t.Fatalf("gRPC health before the first config = %v, want NOT_SERVING", st)
		}
		snap, err := cachev3.NewSnapshot("1", map[resourcev3.Type][]types.Resource{resourcev3.RateLimitConfigType: {
			&rlsconfv3.RateLimitConfig{Name: "eg", Domain: "eg", Descriptors: []*rlsconfv3.RateLimitDescriptor{{
				Key: "k", Value: "v", RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_HOUR, RequestsPerUnit: 1},
			}}},
		}})
		if err != nil {
			t.Fatal(err)
		}
		if err := cache.SetSnapshot(t.Context(), "tollgate-app-test", snap); err != nil {
			t.Fatal(err)
		}
		polltest.Eventually(t, 10*time.Second, func() bool { return readyz(t, httpAddr) == http.StatusOK }, "never ready after the first config")
		if st := grpcHealth(t, grpcAddr); st != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("gRPC health after the first config = %v, want SERVING", st)
		}
		got := codes(t, grpcAddr, 2)
		if got[0] != rlsv3.RateLimitResponse_OK || got[1] != rlsv3.RateLimitResponse_OVER_LIMIT {
			t.Fatalf("two requests against 1 an hour answered %v, want OK then OVER_LIMIT", got)
		}
	})

	t.Run("force start", func(t *testing.T) {
		addr, _ := startXDSServer(t)
		grpcAddr, httpAddr := startXDSApp(t, addr, true)
		if code := readyz(t, httpAddr); code != http.StatusOK {
			t.Fatalf("/readyz with force start = %d, want 200", code)
		}
		if got := codes(t, grpcAddr, 2); got[0] != rlsv3.RateLimitResponse_OK || got[1] != rlsv3.RateLimitResponse_OK {
			t.Fatalf("requests with no rules answered %v, want OK, OK", got)
		}
	})
}
