package app_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/tollgatehq/tollgate/internal/apptest"
	"github.com/tollgatehq/tollgate/pkg/app"
)

// TestServeDynamicMetadata checks that the settings choose the parts of
// the answers' dynamic metadata.
func TestServeDynamicMetadata(t *testing.T) {
	dir := t.TempDir()
	const rules = `
domain: api
descriptors:
  - key: api_key
    metadata: {team: search}
    rate_limit: {unit: minute, requests_per_unit: 5, name: per_key}
`
	if err := os.WriteFile(filepath.Join(dir, "api.yaml"), []byte(rules), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		tweak func(*app.Settings)
		want  []string // the keys of dynamic_metadata
	}{
		{"default", nil, []string{"tollgate"}},
		{"both", func(s *app.Settings) { s.Answers.DynamicMetadata = true }, []string{"descriptors", "domain", "metadata", "tollgate"}},
		{"ratelimit's only", func(s *app.Settings) { s.Answers.DynamicMetadata, s.Answers.DecisionMetadata = true, false }, []string{"descriptors", "domain", "metadata"}},
		{"none", func(s *app.Settings) { s.Answers.DecisionMetadata = false }, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			addr := apptest.Start(t, dir, apptest.Options{Settings: tt.tweak}).GRPCAddr
			conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			resp, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{
				Domain: "api",
				Descriptors: []*ratelimitv3.RateLimitDescriptor{
					{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "api_key", Value: "k"}}},
				},
			})
			if err != nil {
				t.Fatal(err)
			}
			fields := resp.GetDynamicMetadata().GetFields()
			var got []string
			for _, k := range []string{"descriptors", "domain", "metadata", "tollgate"} {
				if _, ok := fields[k]; ok {
					got = append(got, k)
				}
			}
			if len(got) != len(fields) || !slices.Equal(got, tt.want) {
				t.Errorf("dynamic_metadata has keys %v (of %d), want %v", got, len(fields), tt.want)
			}
			if tt.want != nil && tt.want[len(tt.want)-1] == "tollgate" {
				d := fields["tollgate"].GetListValue().GetValues()[0].GetStructValue().GetFields()
				if d["rule"].GetStringValue() != "per_key" || d["code"].GetStringValue() != "OK" || d["remaining"].GetNumberValue() != 4 {
					t.Errorf("tollgate = %v, want per_key, OK, 4 remaining", fields["tollgate"])
				}
			}
		})
	}
}
