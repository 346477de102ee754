package app_test

import (
	"context"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tollgatehq/tollgate/internal/apptest"
	"github.com/tollgatehq/tollgate/pkg/app"
	"github.com/tollgatehq/tollgate/pkg/descriptor"
	"github.com/tollgatehq/tollgate/pkg/rlsclient"
	"github.com/tollgatehq/tollgate/pkg/tlsfiles/tlsfilestest"
)

// TestTrustedSources sends a charge marker and a refund from each source:
// by default only the gRPC service's are honoured, and /v1/check and
// /json answer 400 and count the refusal; --trusted-sources http honours
// them there, and without grpc the gRPC service refuses them; san:NAME
// honours them from the gRPC callers whose certificate carries NAME only.
func TestTrustedSources(t *testing.T) {
	dir := t.TempDir()
	apptest.WriteFile(t, filepath.Join(dir, "api.yaml"), apptest.AdminRules)
	const (
		charge = `{"domain":"api","descriptors":[{"entries":[{"key":"api_key","value":"victim"}],"hits":1000000000,"charge":"always"}]}`
		refund = `{"domain":"api","descriptors":[{"entries":[{"key":"api_key","value":"victim"}],"refund":true}]}`
		json   = `{"domain":"api","descriptors":[{"entries":[{"key":"api_key","value":"victim"},{"key":"tollgate.charge","value":"always"}]}]}`
	)
	post := func(t *testing.T, a *apptest.Running, path, body string) int {
		t.Helper()
		resp, err := http.Post("http://"+a.HTTPAddr+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	marked := []descriptor.Entry{{Key: "api_key", Value: "victim"}, {Key: "tollgate.charge", Value: "always"}}
	query := func(t *testing.T, a *apptest.Running, tls rlsclient.TLS, entries []descriptor.Entry) codes.Code {
		t.Helper()
		client, err := rlsclient.DialTLS(a.GRPCAddr, tls)
		if err != nil {
			t.Fatal(err)
		}
		defer client.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err = client.Query(ctx, rlsclient.Request{Domain: "api", Descriptors: [][]descriptor.Entry{entries}})
		return status.Code(err)
	}
	grpcCode := func(t *testing.T, a *apptest.Running) codes.Code { return query(t, a, rlsclient.TLS{}, marked) }

	t.Run("default", func(t *testing.T) {
		a := apptest.Start(t, dir, apptest.Options{})
		for path, body := range map[string]string{"/v1/check charge": charge, "/v1/check refund": refund, "/json": json} {
			if code := post(t, a, strings.Fields(path)[0], body); code != http.StatusBadRequest {
				t.Errorf("%s: %d, want 400", path, code)
			}
		}
		if code := grpcCode(t, a); code != codes.OK {
			t.Errorf("gRPC with a charge marker: %v, want OK", code)
		}
		if body := apptest.Get(t, "http://"+a.HTTPAddr+"/metrics"); !strings.Contains(body, "\ntollgate_untrusted_charges_refused_total 3\n") {
			t.Errorf("/metrics does not count 3 refusals")
		}
	})
	t.Run("http only", func(t *testing.T) {
		a := apptest.Start(t, dir, apptest.Options{Settings: func(s *app.Settings) { s.Trust.Sources = []string{"http"} }})
		for path, body := range map[string]string{"/v1/check": refund, "/json": json} {
			if code := post(t, a, path, body); code == http.StatusBadRequest {
				t.Errorf("%s: 400, want it honoured", path)
			}
		}
		if code := grpcCode(t, a); code != codes.InvalidArgument {
			t.Errorf("gRPC with a charge marker: %v, want InvalidArgument", code)
		}
	})
	t.Run("client certificates", func(t *testing.T) {
		m := tlsfilestest.NewMutual(t, t.TempDir(), "tollgate.test")
		a := apptest.Start(t, dir, apptest.Options{Settings: func(s *app.Settings) {
			s.GRPCTLS.Cert, s.GRPCTLS.Key, s.GRPCTLS.ClientCA = m.CertFile, m.KeyFile, m.ClientCAFile
			s.Trust.Sources = []string{"san:gateway.test"}
		}})
		as := func(name string) rlsclient.TLS {
			cert, key := m.ClientFiles(t, name)
			return rlsclient.TLS{CAFile: m.CAFile, ServerName: "tollgate.test", CertFile: cert, KeyFile: key}
		}
		gateway, other := as("gateway.test"), as("other.test")
		for _, c := range []struct {
			name    string
			tls     rlsclient.TLS
			entries []descriptor.Entry
			want    codes.Code
		}{
			{"the named caller's charge marker", gateway, marked, codes.OK},
			{"another caller's charge marker", other, marked, codes.InvalidArgument},
			{"another caller's plain call", other, marked[:1], codes.OK},
		} {
			if got := query(t, a, c.tls, c.entries); got != c.want {
				t.Errorf("%s: %v, want %v", c.name, got, c.want)
			}
		}
	})
}
