package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/tollgatehq/tollgate/internal/apptest"
	"github.com/tollgatehq/tollgate/internal/polltest"
	"github.com/tollgatehq/tollgate/pkg/admin"
	"github.com/tollgatehq/tollgate/pkg/app"
	"github.com/tollgatehq/tollgate/pkg/descriptor"
	"github.com/tollgatehq/tollgate/pkg/rlsclient"
)

// heavyHits is how many calls driveTraffic sends for the heavy client:
// past AdminRules' 2 a minute even if a minute's window ends among them.
const heavyHits = 6

// driveTraffic sends a's gRPC service heavyHits calls for api_key=heavy,
// at least 2 of them rejected, and one each for api_key=light1 to light5,
// all allowed.
func driveTraffic(t *testing.T, a *apptest.Admin) {
	t.Helper()
	client, err := rlsclient.Dial(a.GRPCAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	call := func(key string) rlsv3.RateLimitResponse_Code {
		t.Helper()
		resp, err := client.Query(t.Context(), rlsclient.Request{Domain: "api",
			Descriptors: [][]descriptor.Entry{{{Key: "api_key", Value: key}}}})
		if err != nil {
			t.Fatalf("query %s: %v", key, err)
		}
		return resp.GetOverallCode()
	}
	rejected := 0
	for range heavyHits {
		if call("heavy") == rlsv3.RateLimitResponse_OVER_LIMIT {
			rejected++
		}
	}
	if rejected < 2 {
		t.Fatalf("heavy: %d of %d calls rejected, want at least 2", rejected, heavyHits)
	}
	for i := 1; i <= 5; i++ {
		if code := call(fmt.Sprintf("light%d", i)); code != rlsv3.RateLimitResponse_OK {
			t.Fatalf("light%d: %s", i, code)
		}
	}
}

// TestAdminTop drives one client past its limit among light ones and
// reads the top clients back with `tollgate admin top`: as tables, by
// rejections and by requests, with and without --domain, and as JSON.
func TestAdminTop(t *testing.T) {
	a := apptest.StartAdmin(t)
	env := map[string]string{"TOLLGATE_ADMIN_TOKEN": apptest.OpsToken}

	code, out, errOut := runAdmin(t, a, env, "top")
	if code != 0 || out != "no rule decided anything in the last hour\n" {
		t.Errorf("before any traffic: exit %d, %q %q", code, out, errOut)
	}
	driveTraffic(t, a)

	// By rejections only the heavy client is limited; the table is the
	// same with and without --domain, since api is the only domain.
	heavy := regexp.MustCompile(`^api_key +api_key=heavy +6 +([2-9]) +±0$`)
	for _, args := range [][]string{{"top"}, {"top", "--domain", "api", "--window", "1m"}} {
		code, out, errOut := runAdmin(t, a, env, args...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errOut)
		}
		lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
		window := "5m"
		if len(args) > 1 {
			window = "1m"
		}
		if len(lines) != 3 || lines[0] != "api: top by rejected over "+window+", 1 instance" ||
			!regexp.MustCompile(`^RULE +DESCRIPTOR +REQUESTS +REJECTED +±ERROR$`).MatchString(lines[1]) || !heavy.MatchString(lines[2]) {
			t.Errorf("%v printed:\n%s", args, out)
		}
	}

	// By requests the heavy client leads and the light ones follow.
	code, out, errOut = runAdmin(t, a, env, "top", "--by", "requests", "--limit", "3")
	if code != 0 {
		t.Fatalf("--by requests: exit %d: %s", code, errOut)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	light := regexp.MustCompile(`^api_key +api_key=light[1-5] +1 +0 +±0$`)
	if len(lines) != 5 || lines[0] != "api: top by requests over 5m, 1 instance" || !heavy.MatchString(lines[2]) ||
		!light.MatchString(lines[3]) || !light.MatchString(lines[4]) {
		t.Errorf("--by requests --limit 3 printed:\n%s", out)
	}

	// --json prints the API's answer, indented; without --domain, an
	// object of each domain's answer.
	type entry struct {
		Domain, Rule, Limit string
		Descriptor          []descriptor.Entry
		Requests            uint64
	}
	type answer struct {
		Window, By string
		Instances  int
		Entries    []entry
	}
	want := answer{Window: "5m", By: "requests", Instances: 1,
		Entries: []entry{{Domain: "api", Rule: "api_key", Descriptor: []descriptor.Entry{{Key: "api_key", Value: "heavy"}}, Requests: heavyHits}}}
	check := func(name, out string, got *answer) {
		t.Helper()
		if len(got.Entries) > 1 {
			got.Entries = got.Entries[:1]
		}
		if fmt.Sprint(*got) != fmt.Sprint(want) {
			t.Errorf("%s: %+v, want %+v", name, *got, want)
		}
		if !strings.HasPrefix(out, "{\n  \"") {
			t.Errorf("%s printed %q, want indented JSON", name, out)
		}
	}
	code, out, errOut = runAdmin(t, a, env, "top", "--domain", "api", "--by", "requests", "--json")
	var one answer
	if err := json.Unmarshal([]byte(out), &one); code != 0 || err != nil {
		t.Fatalf("--json: exit %d, %v: %q %s", code, err, out, errOut)
	}
	check("--domain api --json", out, &one)
	code, out, errOut = runAdmin(t, a, env, "top", "--by", "requests", "--json")
	var all map[string]answer
	if err := json.Unmarshal([]byte(out), &all); code != 0 || err != nil || len(all) != 1 {
		t.Fatalf("--json without --domain: exit %d, %v: %q %s", code, err, out, errOut)
	}
	api := all["api"]
	check("--json without --domain", out, &api)

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"top", "--by", "hits"}, `tollgate admin top: usage: --by: want rejected or requests, got "hits"` + "\n"},
		{[]string{"top", "--window", "2m"}, `tollgate admin top: usage: --window: want 1m, 5m or 1h, got "2m"` + "\n"},
		{[]string{"top", "--limit", "0"}, "tollgate admin top: usage: --limit: want a number from 1 to 1000, got 0\n"},
	} {
		if code, _, errOut := runAdmin(t, a, env, tc.args...); code != 2 || errOut != tc.want {
			t.Errorf("%v: exit %d, stderr %q; want 2, %q", tc.args, code, errOut, tc.want)
		}
	}
}

// TestAdminTopShadow reads the top clients under shadow rules that allow
// one call an hour per key with `tollgate admin top --shadow`, and the
// refusal of an instance without shadow rules.
func TestAdminTopShadow(t *testing.T) {
	shadowDir := t.TempDir()
	apptest.WriteFile(t, filepath.Join(shadowDir, "api.yaml"),
		"domain: api\ndescriptors:\n  - key: api_key\n    rate_limit: {unit: hour, requests_per_unit: 1}\n")
	a := apptest.StartAdmin(t, func(s *app.Settings) { s.Shadow.ConfigDir = shadowDir })
	env := map[string]string{"TOLLGATE_ADMIN_TOKEN": apptest.OpsToken}
	driveTraffic(t, a)
	polltest.Eventually(t, 10*time.Second, func() bool {
		var st admin.Status
		apptest.GetJSON(t, "http://"+a.AdminAddr+"/v1/status", apptest.OpsToken, &st)
		return st.Shadow != nil && st.Shadow.Decided == heavyHits+5
	}, "the shadow rules did not decide the traffic")

	code, out, errOut := runAdmin(t, a, env, "top", "--shadow")
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if code != 0 || len(lines) != 3 || lines[0] != "api: top by rejected over 5m under the shadow rules, 1 instance" ||
		!regexp.MustCompile(`^api_key +api_key=heavy +6 +5 +±0$`).MatchString(lines[2]) {
		t.Errorf("top --shadow: exit %d, printed:\n%s%s", code, out, errOut)
	}

	live := apptest.StartAdmin(t)
	if code, _, errOut := runAdmin(t, live, env, "top", "--shadow", "--domain", "api"); code != 1 || !strings.Contains(errOut, "no shadow rule set") {
		t.Errorf("top --shadow without shadow rules: exit %d, stderr %q", code, errOut)
	}
}

// TestShowValue holds the views to showing a value with control
// characters quoted, so that a client's descriptor value cannot drive the
// operator's terminal.
func TestShowValue(t *testing.T) {
	for in, want := range map[string]string{
		"sk_live_1": "sk_live_1",
		"käse 🧀":    "käse 🧀",
		"\x1b[2J":   `"\x1b[2J"`,
		"a\nb":      `"a\nb"`,
		"\u009b31m": `"\u009b31m"`,
	} {
		if got := showValue(in); got != want {
			t.Errorf("showValue(%q) = %s, want %s", in, got, want)
		}
	}
}

// TestReadmeAdminTop holds the README's example of admin top to the
// table the command prints: the same first line and columns.
func TestReadmeAdminTop(t *testing.T) {
	data, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, example, ok := strings.Cut(string(data), "$ tollgate admin top --domain api")
	if !ok {
		t.Fatal("README.md has no example of tollgate admin top --domain api")
	}
	lines := strings.Split(example, "\n")
	if len(lines) < 4 {
		t.Fatalf("the example is cut short: %q", example)
	}
	if !regexp.MustCompile(`^api: top by rejected over 5m, \d+ instances?$`).MatchString(lines[1]) {
		t.Errorf("the example's first line %q is not the command's", lines[1])
	}
	if got := strings.Fields(lines[2]); !slices.Equal(got, []string{"RULE", "DESCRIPTOR", "REQUESTS", "REJECTED", "±ERROR"}) {
		t.Errorf("the example's columns %q are not the command's", got)
	}
	if !regexp.MustCompile(`^api_key +api_key=\S+ +\d+ +\d+ +±\d+$`).MatchString(lines[3]) {
		t.Errorf("the example's row %q is not shaped as the command's", lines[3])
	}
}
