package envoytest_test

import (
	"errors"
	"testing"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"

	"github.com/tollgatehq/tollgate/envoy/internal/envoytest"
)

func decodeLimits(t *testing.T, yaml string) []*routev3.RateLimit {
	t.Helper()
	var vh routev3.VirtualHost
	if err := envoytest.DecodeYAML([]byte("name: vh\ndomains: ['*']\nrate_limits:\n"+yaml), &vh); err != nil {
		t.Fatal(err)
	}
	if err := envoytest.Validate(&vh); err != nil {
		t.Fatal(err)
	}
	return vh.GetRateLimits()
}

// TestDescriptors pins the action semantics of Envoy's
// RateLimitPolicyEntryImpl that the model follows.
func TestDescriptors(t *testing.T) {
	req := envoytest.Request{
		Path:          "/a?b=c",
		Headers:       map[string]string{"x-api-key": "k1", "x-tier": "free"},
		RemoteAddress: "192.0.2.7",
	}
	tests := []struct {
		name   string
		limits string
		req    envoytest.Request
		want   []string
	}{{
		name: "request headers in order",
		limits: `
- actions:
  - request_headers: {header_name: x-tier, descriptor_key: tier}
  - request_headers: {header_name: X-Api-Key, descriptor_key: api_key}`,
		want: []string{"[tier=free, api_key=k1]"},
	}, {
		name: "a missing header drops the descriptor, not the others",
		limits: `
- actions:
  - request_headers: {header_name: x-user, descriptor_key: user}
- actions:
  - request_headers: {header_name: x-api-key, descriptor_key: api_key}`,
		want: []string{"[api_key=k1]"},
	}, {
		name: "skip_if_absent leaves out the entry only",
		limits: `
- actions:
  - request_headers: {header_name: x-user, descriptor_key: user, skip_if_absent: true}
  - request_headers: {header_name: x-api-key, descriptor_key: api_key}`,
		want: []string{"[api_key=k1]"},
	}, {
		name: ":path carries the query string",
		limits: `
- actions:
  - request_headers: {header_name: ":path", descriptor_key: path}`,
		want: []string{"[path=/a?b=c]"},
	}, {
		name: "generic_key default key",
		limits: `
- actions:
  - generic_key: {descriptor_value: v}
  - generic_key: {descriptor_key: client, descriptor_value: report}`,
		want: []string{"[generic_key=v, client=report]"},
	}, {
		name: "header_value_match",
		limits: `
- actions:
  - header_value_match:
      descriptor_value: free
      headers: [{name: x-tier, string_match: {exact: free}}]
- actions:
  - header_value_match:
      descriptor_key: paid
      descriptor_value: "no"
      expect_match: false
      headers: [{name: x-tier, string_match: {exact: pro}}]
- actions:
  - header_value_match:
      descriptor_value: pro
      headers: [{name: x-tier, string_match: {exact: pro}}]
- actions:
  - header_value_match:
      descriptor_value: pro
      default_value: other
      headers: [{name: x-tier, string_match: {prefix: pr}}]`,
		want: []string{"[header_match=free]", "[paid=no]", "[header_match=other]"},
	}, {
		name: "present_match on a missing header",
		limits: `
- actions:
  - header_value_match:
      descriptor_value: anonymous
      headers: [{name: x-user, present_match: false}]
- actions:
  - header_value_match:
      descriptor_value: inverted
      headers: [{name: x-user, present_match: true, invert_match: true}]
- actions:
  - header_value_match:
      descriptor_value: never
      headers: [{name: x-user, string_match: {exact: a}, invert_match: true}]`,
		want: []string{"[header_match=anonymous]", "[header_match=inverted]"},
	}, {
		name: "remote_address",
		limits: `
- actions:
  - remote_address: {}`,
		want: []string{"[remote_address=192.0.2.7]"},
	}, {
		name: "remote_address of a non-IP peer fails",
		limits: `
- actions:
  - remote_address: {}`,
		req:  envoytest.Request{Path: "/"},
		want: nil,
	}, {
		name: "other stages are not sent",
		limits: `
- stage: 1
  actions:
  - generic_key: {descriptor_value: v}`,
		want: nil,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := req
			if tt.req.Path != "" {
				r = tt.req
			}
			got, err := envoytest.Descriptors(decodeLimits(t, tt.limits), r)
			if err != nil {
				t.Fatal(err)
			}
			var gotS []string
			for _, d := range got {
				gotS = append(gotS, envoytest.String(d))
			}
			if len(gotS) != len(tt.want) {
				t.Fatalf("got %q, want %q", gotS, tt.want)
			}
			for i := range gotS {
				if gotS[i] != tt.want[i] {
					t.Fatalf("got %q, want %q", gotS, tt.want)
				}
			}
		})
	}
}

func TestDescriptorsUnsupported(t *testing.T) {
	limits := decodeLimits(t, `
- actions:
  - destination_cluster: {}`)
	_, err := envoytest.Descriptors(limits, envoytest.Request{Path: "/"})
	if !errors.Is(err, envoytest.ErrUnsupported) {
		t.Fatalf("got %v, want ErrUnsupported", err)
	}
}

// TestRateLimitCall pins route choice and the precedence of per-route
// domains and rate limits.
func TestRateLimitCall(t *testing.T) {
	var vh routev3.VirtualHost
	err := envoytest.DecodeYAML([]byte(`
name: vh
domains: ["*"]
rate_limits:
  - actions: [{generic_key: {descriptor_value: vh}}]
routes:
  - match: {path: /exact}
    typed_per_filter_config:
      envoy.filters.http.ratelimit:
        "@type": type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimitPerRoute
        domain: other
    route:
      cluster: c
      rate_limits:
        - actions: [{generic_key: {descriptor_value: route}}]
  - match: {prefix: /direct}
    direct_response: {status: 200}
  - match: {prefix: /}
    route: {cluster: c}
`), &vh)
	if err != nil {
		t.Fatal(err)
	}
	filter := &ratelimitv3.RateLimit{Domain: "filter"}
	tests := []struct {
		path, domain, descriptors string
	}{
		{"/exact?q=1", "other", "[generic_key=route]"}, // the query string does not take part in matching
		{"/exact/more", "filter", "[generic_key=vh]"},  // the route has none: the virtual host's apply
		{"/direct", "", ""},                            // direct responses are never rate-limited
	}
	for _, tt := range tests {
		call, err := envoytest.RateLimitCall(filter, &vh, envoytest.Request{Path: tt.path})
		if err != nil {
			t.Fatal(err)
		}
		got := ""
		for _, d := range call.Descriptors {
			got += envoytest.String(d)
		}
		if call.Domain != tt.domain || got != tt.descriptors {
			t.Errorf("%s: got domain %q descriptors %q, want %q %q", tt.path, call.Domain, got, tt.domain, tt.descriptors)
		}
	}
}

// TestStreamDoneCall pins the two calls of a route whose per-route
// rate_limits hold a request-time check and a stream-done report, and
// that a hits_addend where Envoy ignores it is an error.
func TestStreamDoneCall(t *testing.T) {
	var vh routev3.VirtualHost
	err := envoytest.DecodeYAML([]byte(`
name: vh
domains: ["*"]
routes:
  - match: {prefix: /v1/}
    typed_per_filter_config:
      envoy.filters.http.ratelimit:
        "@type": type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimitPerRoute
        domain: llm
        rate_limits:
          - actions: [{request_headers: {header_name: x-api-key, descriptor_key: api_key}}]
            hits_addend: {number: 0}
          - actions: [{request_headers: {header_name: x-api-key, descriptor_key: api_key}}]
            hits_addend: {format: "%DYNAMIC_METADATA(io.envoy.ai_gateway:llm_total_token)%"}
            apply_on_stream_done: true
    route: {cluster: c}
  - match: {prefix: /}
    route:
      cluster: c
      rate_limits:
        - actions: [{generic_key: {descriptor_value: v}}]
          hits_addend: {number: 2}
`), &vh)
	if err != nil {
		t.Fatal(err)
	}
	if err := envoytest.Validate(&vh); err != nil {
		t.Fatal(err)
	}
	filter := &ratelimitv3.RateLimit{Domain: "filter"}
	req := envoytest.Request{Path: "/v1/chat/completions", Headers: map[string]string{"x-api-key": "k1"}}
	tests := []struct {
		name string
		call func(*ratelimitv3.RateLimit, *routev3.VirtualHost, envoytest.Request) (envoytest.Call, error)
		want string
	}{
		{"request", envoytest.RateLimitCall, "llm [api_key=k1] 0"},
		{"stream done", envoytest.StreamDoneCall, "llm [api_key=k1] %DYNAMIC_METADATA(io.envoy.ai_gateway:llm_total_token)%"},
	}
	for _, tt := range tests {
		call, err := tt.call(filter, &vh, req)
		if err != nil {
			t.Fatal(err)
		}
		if len(call.Descriptors) != 1 || len(call.Hits) != 1 {
			t.Fatalf("%s: %d descriptors, %d hits; want 1 and 1", tt.name, len(call.Descriptors), len(call.Hits))
		}
		got := call.Domain + " " + envoytest.String(call.Descriptors[0]) + " " + envoytest.HitsString(call.Hits[0])
		if got != tt.want {
			t.Errorf("%s: got %q, want %q", tt.name, got, tt.want)
		}
	}
	_, err = envoytest.RateLimitCall(filter, &vh, envoytest.Request{Path: "/other"})
	if !errors.Is(err, envoytest.ErrIgnoredHitsAddend) {
		t.Fatalf("hits_addend in a route's rate_limits: got %v, want ErrIgnoredHitsAddend", err)
	}
}
