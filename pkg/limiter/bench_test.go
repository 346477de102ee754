package limiter

import (
	"context"
	"testing"
)

const benchYAML = `
domain: api
descriptors:
  - key: client
    rate_limit: {unit: day, requests_per_unit: 4000000000, algorithm: token_bucket, name: per_client}
  - key: tenant
    descriptors:
      - key: path
        rate_limits:
          - {unit: day, requests_per_unit: 4000000000, algorithm: token_bucket}
          - {unit: hour, requests_per_unit: 4000000000, algorithm: fixed_window}
`

func BenchmarkCheck(b *testing.B) {
	cases := []struct {
		name string
		req  *Request
	}{
		{"one descriptor", req("api", d("client=c1"))},
		{"three descriptors", req("api", d("client=c1"), d("tenant=t1", "path=/x"), d("other=o"))},
	}
	for _, bc := range cases {
		b.Run(bc.name, func(b *testing.B) {
			f := newFixture(b, benchYAML, nil)
			f.store.inner, f.lim.store = nil, f.store.inner // count without recording
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				resp, err := f.lim.Check(ctx, bc.req)
				if err != nil || resp.Code != OK {
					b.Fatalf("Check = %+v, %v", resp, err)
				}
			}
		})
	}
}
