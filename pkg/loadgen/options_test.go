package loadgen

import (
	"errors"
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

func TestValidate(t *testing.T) {
	valid := func(edit func(o *Options)) Options {
		o := Options{Domain: "api", Descriptors: []string{"api_key=k{key}"}}
		if edit != nil {
			edit(&o)
		}
		return o
	}
	tests := []struct {
		name string
		opts Options
		want string // "" for valid
	}{
		{name: "minimal", opts: valid(nil)},
		{name: "everything set", opts: valid(func(o *Options) {
			*o = Options{Addr: "rls:8081", Domain: "api", Descriptors: []string{"a=1", "b={key}"}, Keys: 10,
				Distribution: Zipf, ZipfS: 1.5, Concurrency: 4, Conns: 4, Rate: 100, Duration: time.Second,
				Requests: 10, Warmup: time.Second, Hits: 2, Timeout: time.Second, Seed: 3, KeyWindow: time.Second}
		})},
		{name: "no domain", opts: valid(func(o *Options) { o.Domain = "" }),
			want: "invalid load options: --domain is required"},
		{name: "no descriptor", opts: valid(func(o *Options) { o.Descriptors = nil }),
			want: "invalid load options: at least one --descriptor is required"},
		{name: "bad descriptor", opts: valid(func(o *Options) { o.Descriptors = []string{"a=1", "api_key"} }),
			want: `invalid load options: --descriptor "api_key": entry "api_key" is not key=value`},
		{name: "negative keys", opts: valid(func(o *Options) { o.Keys = -1 }),
			want: "invalid load options: --keys must be at least 1, got -1"},
		{name: "unknown distribution", opts: valid(func(o *Options) { o.Distribution = "pareto" }),
			want: `invalid load options: --dist "pareto" is unknown (want uniform or zipf)`},
		{name: "zipf exponent 1", opts: valid(func(o *Options) { o.Distribution = Zipf; o.ZipfS = 1 }),
			want: "invalid load options: --zipf-s must be a finite number greater than 1, got 1"},
		{name: "zipf exponent ignored for uniform", opts: valid(func(o *Options) { o.ZipfS = 0.5 })},
		{name: "negative concurrency", opts: valid(func(o *Options) { o.Concurrency = -2 }),
			want: "invalid load options: --concurrency (-c) must be at least 1, got -2"},
		{name: "negative conns", opts: valid(func(o *Options) { o.Conns = -1 }),
			want: "invalid load options: --conns must be at least 1, got -1"},
		{name: "more conns than workers", opts: valid(func(o *Options) { o.Concurrency = 2; o.Conns = 3 }),
			want: "invalid load options: --conns 3 exceeds --concurrency (-c) 2: connections without a worker would stay idle"},
		{name: "more conns than default workers", opts: valid(func(o *Options) { o.Conns = 17 }),
			want: "invalid load options: --conns 17 exceeds --concurrency (-c) 16: connections without a worker would stay idle"},
		{name: "negative rate", opts: valid(func(o *Options) { o.Rate = -1 }),
			want: "invalid load options: --rate must be a finite number of requests per second, 0 for the closed loop, got -1"},
		{name: "infinite rate", opts: valid(func(o *Options) { o.Rate = math.Inf(1) }),
			want: "invalid load options: --rate must be a finite number of requests per second, 0 for the closed loop, got +Inf"},
		{name: "negative duration", opts: valid(func(o *Options) { o.Duration = -time.Second }),
			want: "invalid load options: --duration must not be negative, got -1s"},
		{name: "negative requests", opts: valid(func(o *Options) { o.Requests = -5 }),
			want: "invalid load options: --requests (-n) must not be negative, got -5"},
		{name: "negative warmup", opts: valid(func(o *Options) { o.Warmup = -time.Millisecond }),
			want: "invalid load options: --warmup must not be negative, got -1ms"},
		{name: "negative timeout", opts: valid(func(o *Options) { o.Timeout = -time.Second }),
			want: "invalid load options: --timeout must not be negative, got -1s"},
		{name: "negative key window", opts: valid(func(o *Options) { o.KeyWindow = -time.Second }),
			want: "invalid load options: --key-window must not be negative, got -1s"},
		{name: "several errors at once", opts: Options{Keys: -1},
			want: "invalid load options: --domain is required\nat least one --descriptor is required\n--keys must be at least 1, got -1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.opts.Validate()
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil || err.Error() != tt.want {
				t.Fatalf("Validate error =\n%v\nwant\n%s", err, tt.want)
			}
			if !errors.Is(err, ErrInvalidOptions) {
				t.Errorf("Validate error does not wrap ErrInvalidOptions")
			}
		})
	}
}

func TestWithDefaults(t *testing.T) {
	got := Options{Domain: "api", Descriptors: []string{"a=b"}}.withDefaults()
	want := Options{
		Addr: DefaultAddr, Domain: "api", Descriptors: []string{"a=b"}, Keys: DefaultKeys,
		Distribution: DefaultDistribution, ZipfS: DefaultZipfS, Concurrency: DefaultConcurrency,
		Conns: DefaultConns, Duration: DefaultDuration, Timeout: DefaultTimeout,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("withDefaults =\n%+v\nwant\n%+v", got, want)
	}
	if d := (Options{Requests: 10}).withDefaults().Duration; d != 0 {
		t.Errorf("with Requests set, Duration defaults to %s, want 0", d)
	}
}

func TestFlags(t *testing.T) {
	t.Run("defaults", func(t *testing.T) {
		var o Options
		fs := pflag.NewFlagSet("bench", pflag.ContinueOnError)
		o.Flags(fs)
		if err := fs.Parse(nil); err != nil {
			t.Fatal(err)
		}
		want := Options{Addr: DefaultAddr, Keys: DefaultKeys, Distribution: DefaultDistribution, ZipfS: DefaultZipfS,
			Concurrency: DefaultConcurrency, Conns: DefaultConns, Timeout: DefaultTimeout}
		if !reflect.DeepEqual(o, want) {
			t.Errorf("defaults =\n%+v\nwant\n%+v", o, want)
		}
	})
	t.Run("every flag", func(t *testing.T) {
		var o Options
		fs := pflag.NewFlagSet("bench", pflag.ContinueOnError)
		o.Flags(fs)
		args := []string{
			"--addr", "rls:9000", "--domain", "api",
			"--descriptor", "api_key=k{key},endpoint=/search", "--descriptor", "tenant=t{key}",
			"--keys", "500", "--dist", "zipf", "--zipf-s", "1.3", "-c", "32", "--conns", "4", "--rate", "2500.5",
			"--duration", "30s", "-n", "100000", "--warmup", "5s", "--hits", "3", "--timeout", "250ms", "--seed", "42",
			"--key-window", "1s",
		}
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		want := Options{
			Addr: "rls:9000", Domain: "api", Descriptors: []string{"api_key=k{key},endpoint=/search", "tenant=t{key}"},
			Keys: 500, Distribution: Zipf, ZipfS: 1.3, Concurrency: 32, Conns: 4, Rate: 2500.5,
			Duration: 30 * time.Second, Requests: 100000, Warmup: 5 * time.Second, Hits: 3,
			Timeout: 250 * time.Millisecond, Seed: 42, KeyWindow: time.Second,
		}
		if !reflect.DeepEqual(o, want) {
			t.Errorf("parsed =\n%+v\nwant\n%+v", o, want)
		}
	})
	t.Run("long forms of -c and -n", func(t *testing.T) {
		var o Options
		fs := pflag.NewFlagSet("bench", pflag.ContinueOnError)
		o.Flags(fs)
		if err := fs.Parse([]string{"--concurrency=3", "--requests=7"}); err != nil {
			t.Fatal(err)
		}
		if o.Concurrency != 3 || o.Requests != 7 {
			t.Errorf("Concurrency, Requests = %d, %d, want 3, 7", o.Concurrency, o.Requests)
		}
	})
}
