package descriptor

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const examplesDir = "../../config-examples"

// TestConfigExamples loads config-examples and fails on any error. Each
// file must be a domain of its own.
func TestConfigExamples(t *testing.T) {
	tree, err := Load(examplesDir, Options{})
	if err != nil {
		t.Fatalf("config-examples:\n%v", err)
	}
	files, err := filepath.Glob(filepath.Join(examplesDir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 || len(tree.Domains()) != len(files) {
		t.Fatalf("%d files hold %d domains %v", len(files), len(tree.Domains()), tree.Domains())
	}
	for _, name := range tree.Domains() {
		if _, err := os.Stat(tree.Domain(name).File()); err != nil {
			t.Errorf("domain %s: %v", name, err)
		}
	}
}

// TestConfigExamplesResolve checks that the descriptors the examples'
// comments talk about resolve to the rules the comments describe.
func TestConfigExamplesResolve(t *testing.T) {
	tree, err := Load(examplesDir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		domain, entries string
		want            string // the rule as the dump prints it, limits joined by "; "; "" for none
	}{
		{"tiers", "tier=free,api_key=k", "limit: 100 per minute, token_bucket"},
		{"tiers", "tier=pro,api_key=k", "limit: 1000 per minute, token_bucket"},
		{"tiers", "tier=enterprise,api_key=k", "limit: 10000 per minute, token_bucket"},
		{"tiers", "tier=trial,api_key=k", ""},
		{"tiers", "tier=free", ""},

		{"endpoints", "api_key=k,endpoint=/search", "limit: 30 per minute, sliding_window_log"},
		{"endpoints", "api_key=k,endpoint=/users", "limit: 100 per minute, sliding_window_log"},
		{"endpoints", "api_key=k,endpoint=/health", ""},
		{"endpoints", "api_key=k,endpoint=/search/advanced", ""},

		{"tenants", "tenant=acme", "limit: 5000 per second, token_bucket; 10000000 per day, token_bucket"},
		{"tenants", "tenant=acme,user=u", "limit: 200 per second, token_bucket"},
		{"tenants", "tenant=t1", "limit, failure_mode=closed: 1000 per second, token_bucket; 1000000 per day, token_bucket"},
		{"tenants", "tenant=t1,user=u", "limit: 50 per second, token_bucket"},

		{"access", "api_key=sk_internal_leaked", "deny"},
		{"access", "api_key=sk_internal_ci", "allow"},
		{"access", "api_key=sk_revoked_2024", "deny"},
		{"access", "api_key=k", "limit: 60 per minute, token_bucket"},
		{"access", "remote_address=10.1.2.3", "allow"},
		{"access", "remote_address=192.0.2.7", "deny"},
		{"access", "remote_address=192.0.3.7", "limit: 20 per minute, token_bucket"},

		{"algorithms", "client=bursty", "limit: 10 per second, token_bucket, burst 20"},
		{"algorithms", "client=windowed", "limit: 100 per minute, fixed_window"},
		{"algorithms", "client=smooth", "limit: 100 per minute, sliding_window_counter"},
		{"algorithms", "client=exact", "limit: 100 per minute, sliding_window_log"},
		{"algorithms", "client=report", "limit: 5 per 5 minutes, fixed_window"},
		{"algorithms", "client=layered", "limit: 10 per second, token_bucket; 1000 per day, fixed_window"},

		{"legacy", "source_cluster=proxy,destination_cluster=bar", "limit: 100 per minute, token_bucket"},
		{"legacy", "source_cluster=proxy,destination_cluster=baz", ""},
		{"legacy", "path=/api/v1/users", "limit: 50 per second, token_bucket, name api_paths"},
		{"legacy", "path=/api/status", "limit: 1000 per second, token_bucket"},
		{"legacy", "path=/files/a", "limit, shared[0]=\"/files/*\": 20 per second, token_bucket"},
		{"legacy", "plan=bulk", "limit, replaces=api_paths: 500 per second, token_bucket, name bulk"},
		{"legacy", "path=/healthz", "unlimited"},
		{"legacy", "user_agent=curl", "limit, shadow_mode, detailed_metric: 10 per second, token_bucket"},
		{"legacy", "region=eu-west-1-prod", "limit, value_to_metric: 5 per second, token_bucket"},
		{"legacy", "region=us-east-1-prod", ""},
	}
	for _, tt := range tests {
		r := tree.Domain(tt.domain).Match(entries(tt.entries))
		if got := ruleSummary(r); got != tt.want {
			t.Errorf("%s [%s] = %q, want %q", tt.domain, tt.entries, got, tt.want)
		}
	}
}

// ruleSummary prints r compactly, leaving out the default failure mode.
func ruleSummary(r *Rule) string {
	if r == nil {
		return ""
	}
	var b strings.Builder
	writeRule(&b, r, "")
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	head := strings.Replace(lines[0], ", failure_mode=open", "", 1)
	if len(lines) == 1 {
		return head
	}
	return head + ": " + strings.Join(lines[1:], "; ")
}
