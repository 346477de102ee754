package app_test

import (
	"net"
	"net/http"
	"slices"
	"strings"
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
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

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

// startXDSApp runs an App taking its rules, as node nodeID, from the xDS
// server at addr and returns its gRPC and HTTP addresses.
func startXDSApp(t *testing.T, addr, nodeID string, forceStart bool) (grpcAddr, httpAddr string) {
	t.Helper()
	r := apptest.Start(t, "", apptest.Options{Settings: func(s *app.Settings) {
		s.XDS.ConfigType, s.XDS.Server, s.XDS.NodeID, s.XDS.RetryInterval = "xds", addr, nodeID, 20*time.Millisecond
		s.XDS.ForceStart = forceStart
	}})
	return r.GRPCAddr, r.HTTPAddr
}

// setRules makes rules the snapshot of node nodeID in cache.
func setRules(t *testing.T, cache cachev3.SnapshotCache, nodeID, version string, rules ...*rlsconfv3.RateLimitConfig) {
	t.Helper()
	resources := make([]types.Resource, len(rules))
	for i, r := range rules {
		resources[i] = r
	}
	snap, err := cachev3.NewSnapshot(version, map[resourcev3.Type][]types.Resource{resourcev3.RateLimitConfigType: resources})
	if err != nil {
		t.Fatal(err)
	}
	if err := cache.SetSnapshot(t.Context(), nodeID, snap); err != nil {
		t.Fatal(err)
	}
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
	answers := func(t *testing.T, grpcAddr string, n int) []rlsv3.RateLimitResponse_Code {
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
		grpcAddr, httpAddr := startXDSApp(t, addr, "tollgate-app-test", false)
		if code := readyz(t, httpAddr); code != http.StatusServiceUnavailable {
			t.Fatalf("/readyz before the first config = %d, want 503", code)
		}
		if st := grpcHealth(t, grpcAddr); st != healthpb.HealthCheckResponse_NOT_SERVING {
			t.Fatalf("gRPC health before the first config = %v, want NOT_SERVING", st)
		}
		// Unavailable, so that Envoy applies its own failure mode, as it
		// does while envoyproxy/ratelimit opens no port.
		client, err := rlsclient.Dial(grpcAddr)
		if err != nil {
			t.Fatal(err)
		}
		defer client.Close()
		if _, err := client.Query(t.Context(), query); status.Code(err) != codes.Unavailable {
			t.Fatalf("a call before the first config: %v, want Unavailable", err)
		}
		resp, err := http.Post("http://"+httpAddr+"/v1/check", "application/json",
			strings.NewReader(`{"domain":"eg","descriptors":[{"entries":[{"key":"k","value":"v"}]}]}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable {
			t.Fatalf("/v1/check before the first config = %d, want 503", resp.StatusCode)
		}
		setRules(t, cache, "tollgate-app-test", "1", &rlsconfv3.RateLimitConfig{Name: "eg", Domain: "eg", Descriptors: []*rlsconfv3.RateLimitDescriptor{{
			Key: "k", Value: "v", RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_HOUR, RequestsPerUnit: 1},
		}}})
		// The tree is live (ready) a moment before the health turns.
		polltest.Eventually(t, 10*time.Second, func() bool {
			return readyz(t, httpAddr) == http.StatusOK && grpcHealth(t, grpcAddr) == healthpb.HealthCheckResponse_SERVING
		}, "never ready and SERVING after the first config")
		got := answers(t, grpcAddr, 2)
		if got[0] != rlsv3.RateLimitResponse_OK || got[1] != rlsv3.RateLimitResponse_OVER_LIMIT {
			t.Fatalf("two requests against 1 an hour answered %v, want OK then OVER_LIMIT", got)
		}
	})

	t.Run("force start", func(t *testing.T) {
		addr, _ := startXDSServer(t)
		grpcAddr, httpAddr := startXDSApp(t, addr, "tollgate-app-test", true)
		if code := readyz(t, httpAddr); code != http.StatusOK {
			t.Fatalf("/readyz with force start = %d, want 200", code)
		}
		if got := answers(t, grpcAddr, 2); got[0] != rlsv3.RateLimitResponse_OK || got[1] != rlsv3.RateLimitResponse_OK {
			t.Fatalf("requests with no rules answered %v, want OK, OK", got)
		}
	})
}

// TestXDSQuotaMode serves Envoy AI Gateway's QuotaPolicy rules as its own
// xDS server does (node envoy-ai-gateway-ratelimit, one domain, a backend's
// models, quota mode on every limit) and asks as its Envoy does, with a
// descriptor per candidate backend: OK past one's limit while another has
// room, OVER_LIMIT once every candidate is spent, as envoyproxy/ratelimit
// answers.
func TestXDSQuotaMode(t *testing.T) {
	const node = "envoy-ai-gateway-ratelimit"
	addr, cache := startXDSServer(t)
	grpcAddr, httpAddr := startXDSApp(t, addr, node, false)
	backend := func(name string, n uint32) *rlsconfv3.RateLimitDescriptor {
		return &rlsconfv3.RateLimitDescriptor{Key: "backend_name", Value: name, Descriptors: []*rlsconfv3.RateLimitDescriptor{{
			Key: "model_name_override", Value: "gpt-4", QuotaMode: true,
			RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_HOUR, RequestsPerUnit: n},
		}}}
	}
	setRules(t, cache, node, "1", &rlsconfv3.RateLimitConfig{Name: "ai-gateway-quota", Domain: "ai-gateway-quota",
		Descriptors: []*rlsconfv3.RateLimitDescriptor{backend("default/openai", 1), backend("default/azure", 2)}})
	polltest.Eventually(t, 10*time.Second, func() bool { return readyz(t, httpAddr) == http.StatusOK }, "never ready after the first config")

	client, err := rlsclient.Dial(grpcAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	candidate := func(name string) []descriptor.Entry {
		return []descriptor.Entry{{Key: "backend_name", Value: name}, {Key: "model_name_override", Value: "gpt-4"}}
	}
	query := rlsclient.Request{Domain: "ai-gateway-quota", Descriptors: [][]descriptor.Entry{candidate("default/openai"), candidate("default/azure")}}
	var got []rlsv3.RateLimitResponse_Code
	for range 3 {
		resp, err := client.Query(t.Context(), query)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, resp.GetOverallCode())
	}
	want := []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT}
	if !slices.Equal(got, want) {
		t.Fatalf("three requests against candidates of 1 and 2 an hour answered %v, want %v", got, want)
	}
}
