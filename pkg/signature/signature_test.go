package signature_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"strings"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/tollgatehq/tollgate/pkg/signature"
)

// The keys of the tests: 32 bytes each.
var (
	testKey  = mustKey("0123456789abcdef0123456789abcdef")
	otherKey = mustKey("fedcba9876543210fedcba9876543210")
)

func mustKey(k string) *signature.Key {
	key, err := signature.NewKey([]byte(k))
	if err != nil {
		panic(err)
	}
	return key
}

// mac computes the signature of body for purpose p under key as the
// package doc specifies it, independently of the package.
func mac(key, p, body string) string {
	h := hmac.New(sha256.New, []byte(key))
	h.Write([]byte(p + "\x00" + body))
	return hex.EncodeToString(h.Sum(nil))
}

// TestWireFormat pins what Sign writes: the body with "sig" added last,
// the HMAC-SHA256 of the purpose, a zero byte and the body.
func TestWireFormat(t *testing.T) {
	const key = "0123456789abcdef0123456789abcdef"
	for _, tc := range []struct {
		body, want string
	}{
		{`{"overrides":true,"origin":"o"}`,
			`{"overrides":true,"origin":"o","sig":"` + mac(key, "tollgate fleet event v1", `{"overrides":true,"origin":"o"}`) + `"}`},
		{`{}`, `{"sig":"` + mac(key, "tollgate fleet event v1", `{}`) + `"}`},
	} {
		got, err := testKey.Sign(signature.Event, []byte(tc.body))
		if err != nil || string(got) != tc.want {
			t.Errorf("Sign(%s) = %s, %v; want %s", tc.body, got, err, tc.want)
		}
	}
	// One value pinned byte for byte (computed apart, in Python), so that
	// neither the purposes nor the layout change unnoticed.
	const pinned = `{"id":"a","sig":"7d3f0c2cbaebf35ca4f1bdb0292fddcd83af1e3855bc50ca17e044d9423088eb"}`
	if got, err := testKey.Sign(signature.Override, []byte(`{"id":"a"}`)); err != nil || string(got) != pinned {
		t.Errorf("Sign(Override) = %s, %v; want %s", got, err, pinned)
	}
}

// TestVerify checks each way a value can fail to verify, with the error
// Verify gives.
func TestVerify(t *testing.T) {
	body := `{"overrides":true,"origin":"o"}`
	signed, err := testKey.Sign(signature.Event, []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	digits := string(signed[len(signed)-66 : len(signed)-2])
	for _, tc := range []struct {
		name string
		key  *signature.Key
		p    signature.Purpose
		data string
		want error // nil: verifies, to body
	}{
		{"signed", testKey, signature.Event, string(signed), nil},
		{"unsigned", testKey, signature.Event, body, signature.ErrMissing},
		{"empty", testKey, signature.Event, "", signature.ErrMissing},
		{"signature alone", testKey, signature.Event, `{"sig":"` + digits + `"}`, signature.ErrMismatch},
		{"a space before the brace", testKey, signature.Event, strings.TrimSuffix(string(signed), "}") + " }", signature.ErrMissing},
		{"the member not last", testKey, signature.Event, `{"sig":"` + digits + `","overrides":true,"origin":"o"}`, signature.ErrMissing},
		{"another key", otherKey, signature.Event, string(signed), signature.ErrMismatch},
		{"another purpose", testKey, signature.Override, string(signed), signature.ErrMismatch},
		{"altered", testKey, signature.Event, strings.Replace(string(signed), "true", "fals", 1), signature.ErrMismatch},
		{"upper-case digits", testKey, signature.Event, body[:len(body)-1] + `,"sig":"` + strings.ToUpper(digits) + `"}`, signature.ErrMismatch},
		{"a comma after the brace", testKey, signature.Event, `{,"sig":"` + digits + `"}`, signature.ErrMissing},
		{"not an object", testKey, signature.Event, "[" + string(signed[1:]), signature.ErrMismatch},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.key.Verify(tc.p, []byte(tc.data))
			if !errors.Is(err, tc.want) {
				t.Fatalf("Verify = %s, %v; want %v", got, err, tc.want)
			}
			if tc.want == nil && string(got) != body {
				t.Fatalf("Verify = %s, want %s", got, body)
			}
		})
	}
}

// TestSignRefusesNonObjects checks that Sign signs JSON objects only.
func TestSignRefusesNonObjects(t *testing.T) {
	for _, body := range []string{"", "{", "[]", `"x"`, "null"} {
		if got, err := testKey.Sign(signature.Event, []byte(body)); err == nil {
			t.Errorf("Sign(%q) = %s, want an error", body, got)
		}
	}
}

// TestNewKey checks the shortest key taken, and that a key never prints.
func TestNewKey(t *testing.T) {
	if _, err := signature.NewKey([]byte(strings.Repeat("k", 31))); err == nil ||
		err.Error() != "the key is 31 bytes long; at least 32 are needed" {
		t.Fatalf("a 31-byte key: %v", err)
	}
	secret := strings.Repeat("s3cr", 8)
	key, err := signature.NewKey([]byte(secret))
	if err != nil {
		t.Fatal(err)
	}
	var logged strings.Builder
	slog.New(slog.NewTextHandler(&logged, nil)).Info("key", "key", key)
	for _, out := range []string{fmt.Sprintf("%v %+v %#v %s", key, key, key, key), logged.String()} {
		if strings.Contains(out, "s3cr") {
			t.Fatalf("the key shows in %q", out)
		}
	}
}

// TestRefusals checks that refusals are counted by kind and reason, in
// one counter for every kind.
func TestRefusals(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	events, err := signature.NewRefusals(mp, "event")
	if err != nil {
		t.Fatal(err)
	}
	overrides, err := signature.NewRefusals(mp, "override")
	if err != nil {
		t.Fatal(err)
	}
	events.Add(t.Context(), signature.ErrMissing)
	events.Add(t.Context(), signature.ErrMissing)
	overrides.Add(t.Context(), fmt.Errorf("record x: %w", signature.ErrMismatch))
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(t.Context(), &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != "tollgate_fleet_unsigned_refused" {
				continue
			}
			for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
				kind, _ := dp.Attributes.Value("kind")
				reason, _ := dp.Attributes.Value("reason")
				got[kind.AsString()+"/"+reason.AsString()] += dp.Value
			}
		}
	}
	if want := map[string]int64{"event/missing": 2, "override/mismatch": 1}; !maps.Equal(got, want) {
		t.Fatalf("tollgate_fleet_unsigned_refused = %v, want %v", got, want)
	}
}

// FuzzVerify verifies arbitrary bytes, as a keyed instance verifies
// whatever a writer to Redis left. It asserts that Verify never panics;
// that a value that verifies is the one signed form of its body (Sign
// gives its bytes back); and that any JSON object, signed, verifies to
// itself under its key and purpose only.
func FuzzVerify(f *testing.F) {
	for _, body := range []string{`{"overrides":true,"origin":"o"}`, `{}`, `{"id":"a"}`} {
		signed, err := testKey.Sign(signature.Event, []byte(body))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(signed)
		f.Add([]byte(body))
	}
	f.Add([]byte(`{"sig":"`))
	f.Add([]byte(`,"sig":"0000000000000000000000000000000000000000000000000000000000000000"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		if body, err := testKey.Verify(signature.Event, data); err == nil {
			again, err := testKey.Sign(signature.Event, body)
			if err != nil || string(again) != string(data) {
				t.Fatalf("%q verifies to %q, which signs to %q, %v", data, body, again, err)
			}
		}
		if len(data) < 2 || data[0] != '{' || data[len(data)-1] != '}' {
			return
		}
		signed, err := testKey.Sign(signature.Event, data)
		if err != nil {
			t.Fatalf("signing %q: %v", data, err)
		}
		if body, err := testKey.Verify(signature.Event, signed); err != nil || string(body) != string(data) {
			t.Fatalf("%q signs to %q, which verifies to %q, %v", data, signed, body, err)
		}
		if _, err := otherKey.Verify(signature.Event, signed); !errors.Is(err, signature.ErrMismatch) {
			t.Fatalf("%q verifies under another key: %v", signed, err)
		}
		if _, err := testKey.Verify(signature.Override, signed); !errors.Is(err, signature.ErrMismatch) {
			t.Fatalf("%q verifies for another purpose: %v", signed, err)
		}
	})
}
