package app_test

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/tollgatehq/tollgate/internal/apptest"
	"github.com/tollgatehq/tollgate/internal/browsertest"
	"github.com/tollgatehq/tollgate/pkg/descriptor"
	"github.com/tollgatehq/tollgate/pkg/override"
	"github.com/tollgatehq/tollgate/pkg/rlsclient"
)

// TestStatusPage drives the status page of a running tollgate in a real
// headless Chromium, by keyboard: the page loads without a token and shows
// nothing but the sign-in form, calling nothing; a wrong token is refused
// and shows nothing more; signed in, it shows the live rules' hash, the
// initial rule set in the history, and the client sent past its limit at
// the top of its rule's limited clients; an override
// created from the page is there through the API, and is gone once the
// page deletes it. The token crosses the network only in the
// Authorization header of the page's API calls: never in a URL, a cookie
// or localStorage. The page raises no exception and no
// Content-Security-Policy violation, and every field has a label.
func TestStatusPage(t *testing.T) {
	start := time.Now()
	a := apptest.StartAdmin(t)
	base := "http://" + a.AdminAddr
	b := browsertest.Start(t)
	t.Logf("browser started in %v", time.Since(start).Round(time.Millisecond))

	b.Do("load the page without a token",
		chromedp.Navigate(base+"/ui/"),
		chromedp.WaitVisible(chromedp.ID("token")),
		// The script has run once the form has its handler: the
		// multiplier is the enabled choice.
		chromedp.WaitEnabled(chromedp.ID("ov-multiplier")),
	)
	shows := browsertest.Run(b, "read what shows", chromedp.Evaluate[[]string](
		`[...document.querySelectorAll('main > *, header > *')].filter((e) => e.checkVisibility()).map((e) => e.id || e.tagName)`))
	if want := []string{"H1", "login"}; !slices.Equal(shows, want) {
		t.Errorf("before the token, the page shows %q, want only %q", shows, want)
	}
	if got := apiCalls(b.Requests()); len(got) != 0 {
		t.Errorf("before the token, the page called %v", got)
	}
	b.Screenshot("sign-in")
	unlabelled := browsertest.Run(b, "find the fields without a label", chromedp.Evaluate[[]string](
		`[...document.querySelectorAll('input, select, textarea')].filter((e) => e.labels.length === 0).map((e) => e.id)`))
	if len(unlabelled) > 0 {
		t.Errorf("fields without a label: %q", unlabelled)
	}

	const wrongToken = "not-the-token-5e0c4a"
	b.Do("sign in with a wrong token", chromedp.SendKeys(chromedp.ID("token"), wrongToken+"\n"))
	browsertest.Run(b, "wait for the sign-in error", chromedp.Poll[bool](`document.getElementById('login-error').textContent !== ''`))
	if got := browsertest.Run(b, "read the sign-in error", chromedp.Text(chromedp.ID("login-error"))); got != "The admin API refused the token." {
		t.Errorf("after a wrong token the page says %q", got)
	}
	if dashboard := browsertest.Run(b, "look for the sections", chromedp.Evaluate[bool](`document.getElementById('dashboard').checkVisibility()`)); dashboard {
		t.Error("after a wrong token the page shows its sections")
	}
	if got := apiCalls(b.Requests()); !slices.Equal(got, []string{"GET /v1/status"}) {
		t.Errorf("with a wrong token, the page called %v, want GET /v1/status only", got)
	}
	for _, r := range b.Responses() {
		if strings.Contains(r.URL, "/v1/") && r.Status != http.StatusUnauthorized {
			t.Errorf("before the token, %s answered %d", r.URL, r.Status)
		}
	}
	b.Screenshot("sign-in-refused")

	// One client past its limit among light ones: the rules section must
	// put it at the top of its rule.
	client, err := rlsclient.Dial(a.GRPCAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	for i := range 6 {
		for _, key := range []string{"heavy-client", fmt.Sprintf("light-%d", i)} {
			if _, err := client.Query(t.Context(), rlsclient.Request{Domain: "api", Descriptors: [][]descriptor.Entry{{{Key: "api_key", Value: key}}}}); err != nil {
				t.Fatal(err)
			}
		}
	}

	hash := a.Reloader().Status().Hash
	b.Do("sign in with the keyboard",
		chromedp.SendKeys(chromedp.ID("token"), apptest.OpsToken+"\n"),
		chromedp.WaitVisible(chromedp.CSS(`#status [data-field="rules-hash"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#history tbody tr`)),
	)
	if got := browsertest.Run(b, "read the rules hash", chromedp.Text(chromedp.CSS(`#status [data-field="rules-hash"]`))); got != hash {
		t.Errorf("the status shows the rules hash %q, want %q", got, hash)
	}
	history := browsertest.Run(b, "read the history", chromedp.Evaluate[[][]string](
		`[...document.querySelectorAll('#history tbody tr')].map((tr) => [...tr.cells].map((c) => c.textContent))`))
	if len(history) != 1 || history[0][1] != "loaded" || history[0][2] != "initial" || history[0][3] != hash[:12] || history[0][5] != "added: api" {
		t.Errorf("the history shows %q, want the initial rule set %s adding api", history, hash[:12])
	}
	topClient := `#rules tr[data-rule="api_key"] ol.top li:first-child`
	b.Do("wait for the rule's top clients", chromedp.WaitVisible(chromedp.CSS(topClient)))
	if got := browsertest.Run(b, "read the rule's top client", chromedp.Text(chromedp.CSS(topClient))); !strings.HasPrefix(got, "api_key=heavy-client: 4 rejected of 6") {
		t.Errorf("the rule's top limited client is %q, want api_key=heavy-client with 4 rejected of 6", got)
	}
	b.Screenshot("signed-in")

	// The value is markup, which the page must show as text.
	const value = `<b id="injected">ui-client</b>`
	b.Do("create an override with the keyboard",
		chromedp.SendKeys(chromedp.ID("ov-domain"), "api"),
		chromedp.SendKeys(chromedp.ID("ov-entries"), "api_key="+value),
		chromedp.SetValue(chromedp.ID("ov-multiplier"), ""),
		chromedp.SendKeys(chromedp.ID("ov-multiplier"), "3"),
		chromedp.SendKeys(chromedp.ID("ov-reason"), "launch day\n"),
		chromedp.WaitVisible(chromedp.CSS(`#overrides tr[data-override]`)),
	)
	list := listOverrides(t, base)
	if len(list) != 1 || list[0].Domain != "api" || len(list[0].Entries) != 1 || list[0].Entries[0].Value != value ||
		list[0].Multiplier != 3 || list[0].Reason != "launch day" || list[0].CreatedBy != "ops" ||
		time.Until(list[0].ExpiresAt).Round(time.Minute) != time.Hour {
		t.Fatalf("through the API, the overrides are %+v, want the page's: api_key=%s ×3 for 1h by ops", list, value)
	}
	id := list[0].ID
	row := browsertest.Run(b, "read the override", chromedp.Text(chromedp.CSS(`#overrides tr[data-override="`+id+`"]`)))
	if !strings.Contains(row, "api_key="+value) || !strings.Contains(row, "× 3") || !strings.Contains(row, "(in 60 min)") {
		t.Errorf("the page shows the override as %q, want its descriptor as text, × 3 and its expiry in 60 min", row)
	}
	if injected := browsertest.Run(b, "look for the value's markup", chromedp.Evaluate[bool](`document.getElementById('injected') !== null`)); injected {
		t.Error("a descriptor value became markup in the page")
	}
	b.Screenshot("override-created")

	b.Do("delete the override with the keyboard",
		chromedp.Focus(chromedp.CSS(`button[data-delete="`+id+`"]`)),
		chromedp.KeyEvent("\r"),
		chromedp.WaitNotPresent(chromedp.CSS(`#overrides tr[data-override]`)),
	)
	if list := listOverrides(t, base); len(list) != 0 {
		t.Errorf("through the API, after the page deleted it, the overrides are %+v", list)
	}
	b.Screenshot("override-deleted")

	for _, r := range b.Requests() {
		for _, token := range []string{apptest.OpsToken, wrongToken} {
			if strings.Contains(r.URL, token) {
				t.Errorf("a token is in the URL of %s %s", r.Method, strings.ReplaceAll(r.URL, token, "<token>"))
			}
		}
		if strings.HasPrefix(r.URL, base+"/v1/") && r.Authorization != "Bearer "+apptest.OpsToken && r.Authorization != "Bearer "+wrongToken {
			t.Errorf("%s %s went without the token as a bearer token", r.Method, r.URL)
		}
		if !strings.HasPrefix(r.URL, base+"/") {
			t.Errorf("the page called another origin: %s %s", r.Method, r.URL)
		}
	}
	calls := apiCalls(b.Requests())
	for _, want := range []string{"GET /v1/status", "GET /v1/rules/history", "GET /v1/overrides", "POST /v1/overrides", "DELETE /v1/overrides/" + id} {
		if !slices.Contains(calls, want) {
			t.Errorf("the page never called %s; it called %v", want, calls)
		}
	}
	stored := browsertest.Run(b, "read the page's storage", chromedp.Evaluate[[]any](
		`[document.cookie, localStorage.length, sessionStorage.getItem('tollgate.adminToken') !== null]`))
	if stored[0] != "" || stored[1] != float64(0) || stored[2] != true {
		t.Errorf("cookies %q, localStorage items %v, token in sessionStorage %v: want the token in sessionStorage only", stored...)
	}
	if problems := b.Problems(); len(problems) > 0 {
		t.Errorf("the page had problems: %q", problems)
	}
	t.Logf("the browser test took %v", time.Since(start).Round(time.Millisecond))
}

// apiCalls returns "METHOD /path" of the requests to the admin API.
func apiCalls(requests []browsertest.Request) []string {
	var calls []string
	for _, r := range requests {
		if _, path, ok := strings.Cut(r.URL, "/v1/"); ok {
			path, _, _ = strings.Cut(path, "?")
			calls = append(calls, r.Method+" /v1/"+path)
		}
	}
	return calls
}

// listOverrides returns the live overrides of the admin API at base.
func listOverrides(t *testing.T, base string) []override.Override {
	t.Helper()
	var out struct{ Overrides []override.Override }
	if code := apptest.GetJSON(t, base+"/v1/overrides", apptest.OpsToken, &out); code != http.StatusOK {
		t.Fatalf("GET /v1/overrides: %d", code)
	}
	return out.Overrides
}

// The example answers of GET /v1/rules and GET /v1/top, in the contract
// of issue 22, which TestStatusPageRulesContract renders.
const (
	rulesExample = `{"rules":[{"domain":"api","rule":"api_key","limit":"","requests_per_unit":2,"unit":"minute",
		"decisions_per_second_1m":1.5,"decisions_per_second_5m":0.3,"rejected_per_second_1m":0.5,"rejected_per_second_5m":0.1,
		"hottest_ratio":1.25}]}`
	topExample = `{"window":"5m","by":"rejected","instances":2,"entries":[
		{"domain":"api","rule":"api_key","limit":"","descriptor":[{"key":"api_key","value":"<i>heavy</i>"}],"requests":90,"rejected":60,"error":3},
		{"domain":"api","rule":"api_key","limit":"","descriptor":[{"key":"api_key","value":"light"}],"requests":4,"rejected":1,"error":0}]}`
)

// TestStatusPageRulesContract renders the rules section of the status
// page, in a real browser, from the example answers of GET /v1/rules and
// GET /v1/top that issue 22 gives (a value that is markup, an override's
// limit, two instances), and from a /v1/top that answers 404, as it does
// with --top-capacity 0.
func TestStatusPageRulesContract(t *testing.T) {
	a := apptest.StartAdmin(t)
	b := browsertest.Start(t)
	b.Do("sign in",
		chromedp.Navigate("http://"+a.AdminAddr+"/ui/"),
		chromedp.SendKeys(chromedp.ID("token"), apptest.OpsToken+"\n"),
		chromedp.WaitVisible(chromedp.CSS(`#status [data-field="rules-hash"]`)),
	)
	render := func(top string) [][]string {
		return browsertest.Run(b, "render the rules", chromedp.Evaluate[[][]string](`(() => {
			const top = `+top+`;
			const table = tollgateRender.rules(`+rulesExample+`, () => top);
			document.querySelector('#rules .unavailable')?.remove();
			document.querySelector('#rules .content').replaceChildren(table);
			return [...table.querySelectorAll('tbody tr')].map((tr) => [...tr.cells].map((c) => c.textContent));
		})()`))
	}
	want := []string{"api", "api_key", "2 per minute", "1.50", "0.30", "0.50", "0.10", "125 % over",
		"api_key=<i>heavy</i>: 60 rejected of 90 (counts within 3)api_key=light: 1 rejected of 4"}
	if got := render(topExample); len(got) != 1 || !slices.Equal(got[0], want) {
		t.Errorf("the rules section shows %q, want %q", got, want)
	}
	b.Screenshot("rules-contract")
	if got := render("null"); len(got) != 1 || got[0][8] != "Not available on this instance." {
		t.Errorf("without /v1/top, the rules section shows %q, want the top clients not available", got)
	}
	if problems := b.Problems(); len(problems) > 0 {
		t.Errorf("the page had problems: %q", problems)
	}
}
