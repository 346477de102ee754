package integration

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/tollgatehq/tollgate/internal/polltest"
	"github.com/tollgatehq/tollgate/internal/redistest"
	"github.com/tollgatehq/tollgate/pkg/app"
)

// TestRedisTooOld starts tollgate on a server that reports Redis 6.0.9,
// older than the store supports, and checks that decisions are answered
// by the failure modes and that /readyz names the version found and the
// minimum.
func TestRedisTooOld(t *testing.T) {
	srv := redistest.StartFake(t, "6.0.9")
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "faults.yaml"), faultRules)
	svc := startServiceIn(t, dir, func(s *app.Settings) {
		s.Store, s.Redis.Addrs, s.Failure.BreakerOpenTime = "redis", []string{srv.Addr}, breakerOpenTime
	})
	want := fmt.Sprintf("OK, degraded: store unavailable: unsupported server version: Redis 6.0.9 at %s is older than the minimum, Redis 6.2 (or Valkey 7.2), circuit breaker open", srv.Addr)
	polltest.EventuallyEvery(t, settle, pollEvery, func() bool {
		resp := svc.query(t, "faults", entries("tenant", faultTenant, "mode", "open"))
		if resp.OverallCode != rlsv3.RateLimitResponse_OK || !isDegraded(resp) {
			t.Fatalf("mode open on an old redis: %v (degraded %v), want OK, degraded", resp.OverallCode, isDegraded(resp))
		}
		return strings.HasPrefix(svc.get(t, svc.httpAddr, "/readyz"), want)
	}, "/readyz to name the old version")
}
