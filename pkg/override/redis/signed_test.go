package redis_test

import (
	"context"
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tollgatehq/tollgate/internal/logtest"
	"github.com/tollgatehq/tollgate/internal/metrictest"
	"github.com/tollgatehq/tollgate/internal/redistest"
	"github.com/tollgatehq/tollgate/pkg/descriptor"
	"github.com/tollgatehq/tollgate/pkg/override"
	overrideredis "github.com/tollgatehq/tollgate/pkg/override/redis"
	"github.com/tollgatehq/tollgate/pkg/signature"
)

// recordKey is the key the golden signatures are made with.
const recordKey = "override-test-key-0123456789abcd"

func mustKey(t *testing.T, k string) *signature.Key {
	t.Helper()
	key, err := signature.NewKey([]byte(k))
	if err != nil {
		t.Fatal(err)
	}
	return key
}

// recordCases are override records as Redis holds them. The bytes are a
// contract between versions, which share the records during a rolling
// upgrade: without a key they are the override in JSON, as before
// signatures; with recordKey they carry sig, the signature computed apart
// (in Python), as their last member.
var recordCases = []struct {
	name   string
	o      override.Override
	record string
	sig    string
}{
	{
		name: "multiplier",
		o: override.Override{ID: "a1", Domain: "api", Entries: []descriptor.Entry{{Key: "tenant", Value: "acme"}}, Multiplier: 2.5,
			ExpiresAt: time.Date(2026, 3, 2, 12, 0, 0, 0, time.UTC), Reason: "launch", CreatedBy: "ops", CreatedAt: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)},
		record: `{"id":"a1","domain":"api","entries":[{"key":"tenant","value":"acme"}],"multiplier":2.5,"expires_at":"2026-03-02T12:00:00Z",` +
			`"reason":"launch","created_by":"ops","created_at":"2026-03-01T12:00:00Z"}`,
		sig: "b2366a0fe50618f3afac4326491ecab2d91dcbb54a6109830656ca5e7b9eef5d",
	},
	{
		name: "limit",
		o: override.Override{ID: "a2", Domain: "api", Entries: []descriptor.Entry{{Key: "tenant", Value: "<b&b>"}},
			Limit:     &override.Limit{RequestsPerUnit: 100, Unit: "minute"},
			ExpiresAt: time.Date(2026, 3, 2, 12, 0, 0, 0, time.UTC), CreatedAt: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)},
		record: `{"id":"a2","domain":"api","entries":[{"key":"tenant","value":"\u003cb\u0026b\u003e"}],"limit":{"requests_per_unit":100,"unit":"minute"},` +
			`"expires_at":"2026-03-02T12:00:00Z","created_at":"2026-03-01T12:00:00Z"}`,
		sig: "3a7d128f634f4897fea174364e6b1246392b3a3d9bdd4b1a83299838ba5a7714",
	},
}

// signedRecord returns record with the signature sig added, as package
// signature lays it out.
func signedRecord(record, sig string) string {
	return strings.TrimSuffix(record, "}") + `,"sig":"` + sig + `"}`
}

// TestRecordFormat pins the records Put writes, without a key and with
// one, and checks that Load reads each as its override, with the key and
// without.
func TestRecordFormat(t *testing.T) {
	client := goredis.NewClient(&goredis.Options{Addr: redistest.StartStandalone(t).Addr})
	t.Cleanup(func() { _ = client.Close() })
	ctx := context.Background()
	now := func() time.Time { return time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC) }
	for _, keyed := range []bool{false, true} {
		opts := overrideredis.Options{Client: client, KeyPrefix: "f", Now: now}
		if keyed {
			opts.Key = mustKey(t, recordKey)
		}
		s, err := overrideredis.New(opts)
		if err != nil {
			t.Fatal(err)
		}
		unkeyed, err := overrideredis.New(overrideredis.Options{Client: client, KeyPrefix: "f", Now: now})
		if err != nil {
			t.Fatal(err)
		}
		var want []override.Override
		for _, tc := range recordCases {
			if err := s.Put(ctx, tc.o); err != nil {
				t.Fatal(err)
			}
			got, err := client.Get(ctx, "f{%overrides}o:"+tc.o.ID).Result()
			if err != nil {
				t.Fatal(err)
			}
			record := tc.record
			if keyed {
				record = signedRecord(record, tc.sig)
			}
			if got != record {
				t.Errorf("%s, keyed %v: Put wrote\n%s\nwant\n%s", tc.name, keyed, got, record)
			}
			want = append(want, tc.o)
		}
		for name, reader := range map[string]*overrideredis.Store{"the writer": s, "a store without a key": unkeyed} {
			got, err := reader.Load(ctx)
			if err != nil || !sameOverrides(got, want) {
				t.Errorf("keyed %v: %s loads %+v, %v; want %+v", keyed, name, got, err, want)
			}
		}
	}
}

// sameOverrides reports whether a and b hold the same overrides, in any
// order.
func sameOverrides(a, b []override.Override) bool {
	if len(a) != len(b) {
		return false
	}
	for _, x := range a {
		found := false
		for _, y := range b {
			found = found || reflect.DeepEqual(x, y)
		}
		if !found {
			return false
		}
	}
	return true
}

// TestLoadRefusesUnsignedRecords writes, beside a record a keyed store
// signed, one written into Redis by hand without a signature, one signed
// under another key and a signed one altered. A store with the key loads
// the signed record alone, logs and counts each refused one once however
// often it loads, and can still delete a refused one; a store without a
// key loads them all.
func TestLoadRefusesUnsignedRecords(t *testing.T) {
	client := goredis.NewClient(&goredis.Options{Addr: redistest.StartStandalone(t).Addr})
	t.Cleanup(func() { _ = client.Close() })
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Millisecond)
	clock := func() time.Time { return now }
	var logs logtest.Buffer
	mp, metric := metrictest.New(t)
	keyed, err := overrideredis.New(overrideredis.Options{Client: client, KeyPrefix: "x", Now: clock, Key: mustKey(t, recordKey),
		Logger: slog.New(slog.NewTextHandler(&logs, nil)), MeterProvider: mp})
	if err != nil {
		t.Fatal(err)
	}
	stranger, err := overrideredis.New(overrideredis.Options{Client: client, KeyPrefix: "x", Now: clock, Key: mustKey(t, "another-key-0123456789abcdef0123")})
	if err != nil {
		t.Fatal(err)
	}
	unkeyed, err := overrideredis.New(overrideredis.Options{Client: client, KeyPrefix: "x", Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	mk := func(id string) override.Override {
		return override.Override{ID: id, Domain: "api", Entries: []descriptor.Entry{{Key: "k", Value: id}},
			Multiplier: 2, ExpiresAt: now.Add(time.Hour), CreatedAt: now}
	}
	signed, forged, wrong, altered := mk("signed"), mk("forged"), mk("wrong"), mk("altered")
	for _, o := range []override.Override{signed, altered} {
		if err := keyed.Put(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	if err := stranger.Put(ctx, wrong); err != nil {
		t.Fatal(err)
	}
	// By hand, as anyone who can write to Redis could.
	if err := client.Set(ctx, "x{%overrides}o:forged",
		`{"id":"forged","domain":"api","entries":[{"key":"k","value":"forged"}],"multiplier":2,"expires_at":"`+
			forged.ExpiresAt.Format(time.RFC3339Nano)+`","created_at":"`+now.Format(time.RFC3339Nano)+`"}`, time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	if err := client.ZAdd(ctx, "x{%overrides}ids", goredis.Z{Score: float64(forged.ExpiresAt.UnixMilli()), Member: "forged"}).Err(); err != nil {
		t.Fatal(err)
	}
	record, err := client.Get(ctx, "x{%overrides}o:altered").Result()
	if err != nil {
		t.Fatal(err)
	}
	if err := client.Set(ctx, "x{%overrides}o:altered", strings.Replace(record, `"multiplier":2`, `"multiplier":9`, 1), time.Hour).Err(); err != nil {
		t.Fatal(err)
	}

	for range 3 {
		got, err := keyed.Load(ctx)
		if err != nil || !reflect.DeepEqual(got, []override.Override{signed}) {
			t.Fatalf("the keyed store loads %+v, %v; want the signed override alone", got, err)
		}
	}
	if got := metric("tollgate_fleet_unsigned_refused"); got != 3 {
		t.Errorf("tollgate_fleet_unsigned_refused = %d, want 3", got)
	}
	for _, want := range []string{`id=forged error="no signature"`, `id=wrong error="signature does not match"`, `id=altered error="signature does not match"`} {
		if n := strings.Count(logs.String(), `override record in redis without a valid signature; refused" component=overrides `+want); n != 1 {
			t.Errorf("%q logged %d times, want once:\n%s", want, n, logs.String())
		}
	}
	altered.Multiplier = 9
	got, err := unkeyed.Load(ctx)
	if err != nil || !sameOverrides(got, []override.Override{signed, forged, wrong, altered}) {
		t.Errorf("the store without a key loads %+v, %v; want all four", got, err)
	}
	if deleted, err := keyed.Delete(ctx, "forged"); err != nil || !reflect.DeepEqual(deleted, forged) {
		t.Errorf("deleting the refused record: %+v, %v", deleted, err)
	}
}
