package limiter

import (
	"testing"
)

// TestCheckStatusRule checks which rule each kind of decision names in
// Status.Rule, by its path.
func TestCheckStatusRule(t *testing.T) {
	const yaml = `
domain: api
descriptors:
  - key: api_key
    value: "internal_*"
    action: allow
  - key: api_key
    value: "revoked_*"
    action: deny
  - key: api_key
    rate_limit: {unit: minute, requests_per_unit: 1, algorithm: fixed_window, name: per_key}
  - key: free
    rate_limit: {unlimited: true}
  - key: tenant
    descriptors:
      - key: path
        rate_limit: {unit: minute, requests_per_unit: 10, algorithm: fixed_window}
  - key: base
    rate_limit: {unit: minute, requests_per_unit: 1, algorithm: fixed_window, name: base}
  - key: premium
    rate_limit: {unit: minute, requests_per_unit: 5, algorithm: fixed_window, replaces: [{name: base}]}
  - key: quota
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 0, algorithm: fixed_window}
`
	over := &Override{RequestsPerUnit: 3, Unit: 2}
	tests := []struct {
		name     string
		req      *Request
		override bool // the first descriptor carries over
		want     []string
		code     []Code
	}{
		{"counted", req("api", d("api_key=k"), d("tenant=t", "path=/x")), false,
			[]string{"api_key", "tenant/path"}, []Code{OK, OK}},
		{"allow, deny and unlimited", req("api", d("api_key=internal_1"), d("api_key=revoked_1"), d("free=f")), false,
			[]string{"api_key=internal_*", "api_key=revoked_*", "free"}, []Code{OK, OverLimit, OK}},
		{"unmatched and no limits", req("api", d("nope=n"), d("tenant=t")), false,
			[]string{"", ""}, []Code{OK, OK}},
		{"replaced", req("api", d("base=b"), d("premium=p")), false,
			[]string{"", "premium"}, []Code{OK, OK}},
		{"override", req("api", d("api_key=k")), true,
			[]string{""}, []Code{OK}},
		{"quota over", req("api", d("quota=q")), false,
			[]string{"quota"}, []Code{OverLimit}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, yaml, nil)
			if tt.override {
				tt.req.Descriptors[0].Override = over
			}
			resp := f.check(t, tt.req)
			if len(resp.Statuses) != len(tt.want) {
				t.Fatalf("%d statuses, want %d", len(resp.Statuses), len(tt.want))
			}
			for i, st := range resp.Statuses {
				got := ""
				if st.Rule != nil {
					got = st.Rule.Path
				}
				if got != tt.want[i] || st.Code != tt.code[i] {
					t.Errorf("Statuses[%d]: rule %q, code %v; want %q, %v", i, got, st.Code, tt.want[i], tt.code[i])
				}
			}
		})
	}
}
