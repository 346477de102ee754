package rls

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tollgatehq/tollgate/pkg/limiter"
)

func TestJSONHandler(t *testing.T) {
	perKey := &rlsv3.RateLimitResponse_RateLimit{Name: "per_key", RequestsPerUnit: 2, Unit: rlsv3.RateLimitResponse_RateLimit_MINUTE}
	unavailable := checkerFunc(func(context.Context, *limiter.Request) (*limiter.Response, error) {
		return nil, limiter.ErrUnavailable
	})
	tests := []struct {
		name       string
		checker    Checker
		method     string
		body       string
		wantStatus int
		want       *rlsv3.RateLimitResponse // decoded from the body when set
		wantText   string                   // the plain-text error otherwise
	}{
		{
			name:       "OK",
			body:       `{"domain":"api","descriptors":[{"entries":[{"key":"api_key","value":"j"}]}]}`,
			wantStatus: http.StatusOK,
			want: &rlsv3.RateLimitResponse{
				OverallCode: rlsv3.RateLimitResponse_OK,
				Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{
					{Code: rlsv3.RateLimitResponse_OK, CurrentLimit: perKey, LimitRemaining: 1, DurationUntilReset: &durationpb.Duration{Seconds: 50}},
				},
			},
		},
		{
			name:       "over the limit",
			body:       `{"domain":"api","hitsAddend":3,"descriptors":[{"entries":[{"key":"api_key","value":"k"}]}]}`,
			wantStatus: http.StatusTooManyRequests,
			want: &rlsv3.RateLimitResponse{
				OverallCode: rlsv3.RateLimitResponse_OVER_LIMIT,
				Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{
					{Code: rlsv3.RateLimitResponse_OVER_LIMIT, CurrentLimit: perKey, LimitRemaining: 2, DurationUntilReset: &durationpb.Duration{}},
				},
			},
		},
		{
			name:       "not JSON",
			body:       `{"domain":`,
			wantStatus: http.StatusBadRequest,
			wantText:   "decoding RateLimitRequest: ",
		},
		{
			name:       "unknown field",
			body:       `{"domain":"api","nope":1}`,
			wantStatus: http.StatusBadRequest,
			wantText:   "decoding RateLimitRequest: ",
		},
		{
			name:       "malformed request",
			body:       `{"domain":"api","descriptors":[{"entries":[{"key":""}]}]}`,
			wantStatus: http.StatusBadRequest,
			wantText:   "invalid rate-limit request: descriptors[0].entries[0]: empty key\n",
		},
		{
			name:       "too large",
			body:       `{"domain":"` + strings.Repeat("a", 2000) + `"}`,
			wantStatus: http.StatusRequestEntityTooLarge,
			wantText:   "request body too large\n",
		},
		{
			name:       "engine unavailable",
			checker:    unavailable,
			body:       `{"domain":"api","descriptors":[{"entries":[{"key":"k"}]}]}`,
			wantStatus: http.StatusServiceUnavailable,
			wantText:   "store unavailable\n",
		},
		{
			name:       "GET",
			method:     http.MethodGet,
			wantStatus: http.StatusMethodNotAllowed,
			wantText:   "method not allowed: use POST\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checker := tt.checker
			if checker == nil {
				checker = newLimiter(t)
			}
			h := http.MaxBytesHandler(New(Options{Limiter: checker, OmitDecisionMetadata: true}).JSONHandler(), 1024)
			method := tt.method
			if method == "" {
				method = http.MethodPost
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(method, "/json", strings.NewReader(tt.body)))
			if rec.Code != tt.wantStatus {
				t.Errorf("status = %d, want %d (body %q)", rec.Code, tt.wantStatus, rec.Body)
			}
			if tt.want == nil {
				if got := rec.Body.String(); !strings.HasPrefix(got, tt.wantText) {
					t.Errorf("body = %q, want it to start with %q", got, tt.wantText)
				}
				return
			}
			if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type = %q, want application/json", ct)
			}
			var got rlsv3.RateLimitResponse
			if err := protojson.Unmarshal(rec.Body.Bytes(), &got); err != nil {
				t.Fatalf("decoding %q: %v", rec.Body, err)
			}
			// Headers and body are covered by the gRPC tests.
			got.ResponseHeadersToAdd, got.RawBody = nil, nil
			if diff := cmpProto(&got, tt.want); diff != "" {
				t.Errorf("response differs:\n%s", diff)
			}
		})
	}
}
