package override_test

import (
	"context"
	"errors"
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/tollgatehq/tollgate/internal/logtest"
	"github.com/tollgatehq/tollgate/internal/metrictest"
	"github.com/tollgatehq/tollgate/pkg/descriptor"
	"github.com/tollgatehq/tollgate/pkg/override"
	"github.com/tollgatehq/tollgate/pkg/override/statefile"
	"github.com/tollgatehq/tollgate/pkg/store/storetest"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

const rules = `
domain: api
descriptors:
  - key: tenant
    descriptors:
      - key: path
        rate_limit: {unit: minute, requests_per_unit: 10}
  - key: free
    rate_limit: {unlimited: true}
  - key: banned
    action: deny
  - key: log
    rate_limit: {unit: minute, requests_per_unit: 5000, algorithm: sliding_window_log}
`

func tree(t *testing.T) *descriptor.Tree {
	t.Helper()
	tr, err := descriptor.LoadFS(fstest.MapFS{"api.yaml": {Data: []byte(rules)}}, descriptor.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

type registry struct {
	*override.Registry
	clock   *storetest.Clock
	logs    *logtest.Buffer
	changes [][]override.Override
	metric  func(string) int64
}

// newRegistry returns a registry on the state file in dir, its options
// changed by edit.
func newRegistry(t *testing.T, dir string, edit ...func(*override.Options)) *registry {
	t.Helper()
	clock := storetest.NewClock(t0)
	logs := &logtest.Buffer{}
	backend, err := statefile.Open(dir, statefile.Options{Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	tr := tree(t)
	mp, read := metrictest.New(t)
	r := &registry{clock: clock, logs: logs, metric: read}
	opts := override.Options{
		Backend:       backend,
		Tree:          func() *descriptor.Tree { return tr },
		MaxTTL:        48 * time.Hour,
		Now:           clock.Now,
		Logger:        slog.New(slog.NewTextHandler(logs, nil)),
		MeterProvider: mp,
		OnChange:      func(c []override.Override) { r.changes = append(r.changes, c) },
	}
	for _, e := range edit {
		e(&opts)
	}
	r.Registry, err = override.NewRegistry(opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	return r
}

func entries(kv ...string) []descriptor.Entry {
	var out []descriptor.Entry
	for _, s := range kv {
		k, v, _ := strings.Cut(s, "=")
		out = append(out, descriptor.Entry{Key: k, Value: v})
	}
	return out
}

// TestCreateRefuses checks every reason an override is refused, each
// with its exact message.
func TestCreateRefuses(t *testing.T) {
	r := newRegistry(t, t.TempDir())
	valid := override.Override{Domain: "api", Entries: entries("tenant=acme"), Multiplier: 2, ExpiresAt: t0.Add(time.Hour)}
	tests := []struct {
		name string
		edit func(o *override.Override)
		want string
	}{
		{"no domain", func(o *override.Override) { o.Domain = "" }, "no domain"},
		{"unknown domain", func(o *override.Override) { o.Domain = "nope" }, `unknown domain "nope"`},
		{"no entries", func(o *override.Override) { o.Entries = nil }, "no entries"},
		{"empty key", func(o *override.Override) { o.Entries = entries("=x") }, "entries[0]: empty key"},
		{"no rule", func(o *override.Override) { o.Entries = entries("user=u") }, `entries user=u resolve to no rule with a limit in domain "api"`},
		{"unlimited", func(o *override.Override) { o.Entries = entries("free=1") }, `entries free=1 resolve to no rule with a limit in domain "api"`},
		{"deny list", func(o *override.Override) { o.Entries = entries("banned=1") }, `entries banned=1 resolve to no rule with a limit in domain "api"`},
		{"too deep", func(o *override.Override) { o.Entries = entries("tenant=a", "path=/", "x=y") }, `entries tenant=a/path=//x=y resolve to no rule with a limit in domain "api"`},
		{"both", func(o *override.Override) { o.Limit = &override.Limit{RequestsPerUnit: 1, Unit: "hour"} }, "both limit and multiplier; set one"},
		{"neither", func(o *override.Override) { o.Multiplier = 0 }, "neither limit nor multiplier; set one"},
		{"negative multiplier", func(o *override.Override) { o.Multiplier = -1 }, "multiplier -1: must be positive"},
		{"unknown unit", func(o *override.Override) {
			o.Multiplier, o.Limit = 0, &override.Limit{RequestsPerUnit: 1, Unit: "fortnight"}
		}, `limit: unknown unit "fortnight" (want second, minute, hour, day, week, month or year)`},
		{"no expiry", func(o *override.Override) { o.ExpiresAt = time.Time{} }, "no expiry"},
		{"expired", func(o *override.Override) { o.ExpiresAt = t0 }, "expiry 2026-03-01T12:00:00Z is in the past"},
		{"too far", func(o *override.Override) { o.ExpiresAt = t0.Add(49 * time.Hour) }, "expiry 2026-03-03T13:00:00Z is more than the maximum 48h0m0s away"},
		// A sliding-window log of 5000 a minute multiplied past the
		// log's bound of 10 000 would reject every request.
		{"log multiplied past its bound", func(o *override.Override) { o.Entries, o.Multiplier = entries("log=k"), 3 },
			"the limit it would give rule log: requests 15000 outside [0, 10000] for sliding_window_log"},
		{"log limit past its bound", func(o *override.Override) {
			o.Entries, o.Multiplier, o.Limit = entries("log=k"), 0, &override.Limit{RequestsPerUnit: 20000, Unit: "minute"}
		}, "the limit it would give rule log: requests 20000 outside [0, 10000] for sliding_window_log"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := valid
			tt.edit(&o)
			_, err := r.Create(context.Background(), o)
			if !errors.Is(err, override.ErrInvalid) || err.Error() != "invalid override: "+tt.want {
				t.Fatalf("Create error = %v, want invalid override: %s", err, tt.want)
			}
		})
	}
	if r.Current() != nil {
		t.Fatal("a refused override is live")
	}
	// Up to the bound, the log's override is taken.
	if _, err := r.Create(context.Background(), override.Override{Domain: "api", Entries: entries("log=k"), Multiplier: 2, ExpiresAt: t0.Add(time.Hour)}); err != nil {
		t.Errorf("an override that takes the log to its bound: %v", err)
	}
}

// TestRegistryLifecycle follows an override from its creation to its
// expiry, and another to its deletion.
func TestRegistryLifecycle(t *testing.T) {
	r := newRegistry(t, t.TempDir())
	ctx := context.Background()
	a, err := r.Create(ctx, override.Override{Domain: "api", Entries: entries("tenant=acme"), Multiplier: 5,
		ExpiresAt: t0.Add(time.Hour), Reason: "launch", CreatedBy: "ops"})
	if err != nil {
		t.Fatal(err)
	}
	if len(a.ID) != 16 || !a.CreatedAt.Equal(t0) {
		t.Fatalf("created %+v: want a 16-digit id and CreatedAt %v", a, t0)
	}
	r.clock.Advance(time.Second)
	b, err := r.Create(ctx, override.Override{Domain: "api", Entries: entries("tenant=big", "path=/x"),
		Limit: &override.Limit{RequestsPerUnit: 500, Unit: "Minute"}, ExpiresAt: t0.Add(2 * time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if got := r.Current().Match("api", []descriptor.Entry{{Key: "tenant", Value: "acme"}, {Key: "path", Value: "/"}}, r.clock.Now()); got == nil || got.ID != a.ID {
		t.Fatalf("Match = %+v, want %s", got, a.ID)
	}
	list, err := r.List(ctx, "")
	if err != nil || !reflect.DeepEqual(list, []override.Override{a, b}) {
		t.Fatalf("List = %+v, %v; want the two, oldest first", list, err)
	}
	if list, _ := r.List(ctx, "other"); len(list) != 0 {
		t.Fatalf("List(other) = %+v", list)
	}
	if got, err := r.Get(ctx, b.ID); err != nil || !reflect.DeepEqual(got, b) {
		t.Fatalf("Get = %+v, %v", got, err)
	}
	if n := r.metric("tollgate_overrides_active"); n != 2 {
		t.Fatalf("tollgate_overrides_active = %d, want 2", n)
	}

	if got, err := r.Delete(override.WithActor(ctx, "alice"), b.ID); err != nil || got.ID != b.ID {
		t.Fatalf("Delete = %+v, %v", got, err)
	}
	for _, err := range []error{
		func() error { _, err := r.Get(ctx, b.ID); return err }(),
		func() error { _, err := r.Delete(ctx, b.ID); return err }(),
	} {
		if !errors.Is(err, override.ErrNotFound) {
			t.Fatalf("after Delete: %v, want %v", err, override.ErrNotFound)
		}
	}

	r.clock.Set(a.ExpiresAt)
	if got := r.Current().Match("api", []descriptor.Entry{{Key: "tenant", Value: "acme"}}, r.clock.Now()); got != nil {
		t.Fatalf("an expired override matches: %+v", got)
	}
	if _, err := r.Get(ctx, a.ID); !errors.Is(err, override.ErrNotFound) {
		t.Fatalf("Get of an expired override: %v, want %v", err, override.ErrNotFound)
	}
	if err := r.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if r.Current() != nil {
		t.Fatal("the snapshot keeps an expired override")
	}
	if n := r.metric("tollgate_overrides_active"); n != 0 {
		t.Fatalf("tollgate_overrides_active = %d, want 0", n)
	}
	var ids [][]string
	for _, c := range r.changes {
		var s []string
		for _, o := range c {
			s = append(s, o.ID)
		}
		ids = append(ids, s)
	}
	if want := [][]string{{a.ID}, {b.ID}, {b.ID}, {a.ID}}; !reflect.DeepEqual(ids, want) {
		t.Fatalf("OnChange got %v, want %v", ids, want)
	}
	logs := r.logs.String()
	for _, want := range []string{
		"msg=\"override created\" component=overrides id=" + a.ID,
		"created_by=ops reason=launch",
		"msg=\"override deleted\" component=overrides id=" + b.ID,
		"deleted_by=alice",
		"msg=\"override expired\" component=overrides id=" + a.ID,
	} {
		if !strings.Contains(logs, want) {
			t.Errorf("the log lacks %q:\n%s", want, logs)
		}
	}
}

// TestStoredOverridesChecked writes overrides the registry would refuse
// straight into its backend, as another instance or anyone with write
// access to Redis could: they are skipped, logged once each, and not
// listed, while a good one beside them is live.
func TestStoredOverridesChecked(t *testing.T) {
	dir := t.TempDir()
	backend, err := statefile.Open(dir, statefile.Options{Now: func() time.Time { return t0 }})
	if err != nil {
		t.Fatal(err)
	}
	good := override.Override{ID: "good", Domain: "api", Entries: entries("tenant=acme"), Multiplier: 2, ExpiresAt: t0.Add(time.Hour), CreatedAt: t0}
	negative, tooLong := good, good
	negative.ID, negative.Multiplier = "negative", -3
	tooLong.ID, tooLong.ExpiresAt = "too-long", t0.Add(1000*time.Hour)
	for _, o := range []override.Override{good, negative, tooLong} {
		if err := backend.Put(context.Background(), o); err != nil {
			t.Fatal(err)
		}
	}
	r := newRegistry(t, dir) // reads the backend once
	if err := r.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	if all := r.Current().All(); len(all) != 1 || all[0].ID != "good" {
		t.Errorf("live overrides %+v, want good alone", all)
	}
	listed, err := r.List(context.Background(), "")
	if err != nil || len(listed) != 1 || listed[0].ID != "good" {
		t.Errorf("List = %+v, %v; want good alone", listed, err)
	}
	for _, want := range []string{
		`msg="stored override skipped" component=overrides id=negative error="invalid override: multiplier -3: must be positive"`,
		`msg="stored override skipped" component=overrides id=too-long error="invalid override: expiry 2026-04-12T04:00:00Z is more than the maximum 48h0m0s away"`,
	} {
		if n := strings.Count(r.logs.String(), want); n != 1 {
			t.Errorf("%d lines %s, want 1 over two refreshes:\n%s", n, want, r.logs)
		}
	}
}

// TestLearnedOverridesLogged checks that an override another writer put
// in the backend is logged when this instance learns of it, and one this
// instance created is not logged again as learned.
func TestLearnedOverridesLogged(t *testing.T) {
	dir := t.TempDir()
	backend, err := statefile.Open(dir, statefile.Options{Now: func() time.Time { return t0 }})
	if err != nil {
		t.Fatal(err)
	}
	other := override.Override{ID: "other", Domain: "api", Entries: entries("tenant=theirs"), Multiplier: 2, ExpiresAt: t0.Add(time.Hour), CreatedAt: t0}
	if err := backend.Put(context.Background(), other); err != nil {
		t.Fatal(err)
	}
	r := newRegistry(t, dir) // reads the backend once
	mine, err := r.Create(context.Background(), override.Override{Domain: "api", Entries: entries("tenant=mine"), Multiplier: 3, ExpiresAt: t0.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	logs := r.logs.String()
	if n := strings.Count(logs, `msg="override learned from the store"`); n != 1 || !strings.Contains(logs, `msg="override learned from the store" component=overrides id=other`) {
		t.Errorf("want one learned line, of other:\n%s", logs)
	}
	if strings.Contains(logs, `msg="override learned from the store" component=overrides id=`+mine.ID) {
		t.Errorf("the override created here is logged as learned:\n%s", logs)
	}
}

// TestHashedValues checks that with Options.Values ValuesHash no line of
// the log, nor a refusal, shows an override's descriptor values, but their
// hashes; that keys show as they are; and that the override still applies
// to the plain value.
func TestHashedValues(t *testing.T) {
	const mine, theirs, unknown = "sk-live-mine-5d1e", "sk-live-theirs-90ac", "sk-live-unknown-7b3f"
	hash := descriptor.ValuesHash.Show
	dir := t.TempDir()
	backend, err := statefile.Open(dir, statefile.Options{Now: func() time.Time { return t0 }})
	if err != nil {
		t.Fatal(err)
	}
	other := override.Override{ID: "other", Domain: "api", Entries: entries("tenant=" + theirs), Multiplier: 2, ExpiresAt: t0.Add(time.Hour), CreatedAt: t0}
	if err := backend.Put(context.Background(), other); err != nil {
		t.Fatal(err)
	}
	r := newRegistry(t, dir, func(o *override.Options) { o.Values = descriptor.ValuesHash }) // learns other
	ctx := context.Background()
	o, err := r.Create(ctx, override.Override{Domain: "api", Entries: entries("tenant="+mine, "path=/x"), Multiplier: 3, ExpiresAt: t0.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(o.Entries, entries("tenant="+mine, "path=/x")) {
		t.Errorf("Create returned entries %v: the registry keeps values as they are", o.Entries)
	}
	if got := r.Current().Match("api", entries("tenant="+mine, "path=/x"), r.clock.Now()); got == nil || got.ID != o.ID {
		t.Errorf("Match of the plain value = %+v, want %s", got, o.ID)
	}
	_, err = r.Create(ctx, override.Override{Domain: "api", Entries: entries("user=" + unknown), Multiplier: 3, ExpiresAt: t0.Add(time.Hour)})
	if want := `invalid override: entries user=` + hash(unknown) + ` resolve to no rule with a limit in domain "api"`; err == nil || err.Error() != want {
		t.Errorf("refusal %v, want %s", err, want)
	}
	if _, err := r.Delete(ctx, o.ID); err != nil {
		t.Fatal(err)
	}
	r.clock.Set(other.ExpiresAt)
	if err := r.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	logs := r.logs.String()
	for _, want := range []string{
		`msg="override learned from the store" component=overrides id=other domain=api entries="tenant=` + hash(theirs) + `"`,
		`msg="override created" component=overrides id=` + o.ID + ` domain=api entries="tenant=` + hash(mine) + "/path=" + hash("/x") + `"`,
		`msg="override deleted" component=overrides id=` + o.ID + ` domain=api entries="tenant=` + hash(mine) + "/path=" + hash("/x") + `"`,
		`msg="override expired" component=overrides id=other domain=api entries="tenant=` + hash(theirs) + `"`,
	} {
		if !strings.Contains(logs, want) {
			t.Errorf("the log lacks %q:\n%s", want, logs)
		}
	}
	for _, secret := range []string{mine, theirs, unknown} {
		if strings.Contains(logs, secret) || strings.Contains(logs, secret[:12]) {
			t.Errorf("the log shows %q:\n%s", secret, logs)
		}
	}
}
