// Package loadgen drives load against any Envoy RateLimitService (tollgate or
// another) and reports throughput, answers and latency.
//
// Two modes are offered. In the closed loop (Rate 0) Concurrency workers,
// spread round-robin over Conns gRPC connections, each send their next
// request as soon as the previous answer arrives. In the open loop (Rate > 0)
// requests are scheduled at evenly spaced times, Rate per second, and run by
// up to Concurrency workers. A request that comes due while every worker is
// busy waits for one, and its latency is measured from its scheduled time, so
// a slow service is charged for the wait (coordinated-omission safe); a
// request whose worker was idle is measured from its actual send, so the
// timer's own lag (up to about 1 ms) is not. A scheduled request is never
// dropped silently: it is sent late, counted in Result.Late when it waited
// more than 1 ms, or counted in Result.Unsent when the service falls behind
// the end of the run by more than Timeout. Give the open loop enough workers:
// Concurrency of at least Rate × (expected latency + 1 ms).
//
// Each request carries one descriptor per template in Options.Descriptors;
// "{key}" in a template is replaced by a key number from 0 to Keys-1, chosen
// uniformly or from a Zipf distribution in which key 0 is the most frequent.
// Requests are encoded from precompiled templates and only the overall code
// of each answer is decoded, so the generator spends little CPU of its own;
// Result.ClientCPUPerRequestUS reports how much.
//
// On the command line (see Options.Flags), long flags take two dashes:
//
//	tollgate bench --addr 127.0.0.1:8081 --domain api \
//	  --descriptor 'api_key=k{key},endpoint=/search' --keys 10000 --dist zipf \
//	  -c 64 --conns 4 --duration 30s --warmup 5s
package loadgen

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/spf13/pflag"

	"github.com/tollgatehq/tollgate/pkg/rlsclient"
)

// DefaultAddr and the other Default constants replace zero fields of
// Options in Run, and are the defaults of the flags that Flags registers.
const (
	DefaultAddr         = "127.0.0.1:8081"
	DefaultKeys         = 1000
	DefaultDistribution = Uniform
	DefaultZipfS        = 1.1
	DefaultConcurrency  = 16
	DefaultConns        = 1
	DefaultDuration     = 10 * time.Second
	DefaultTimeout      = time.Second
)

// Uniform and Zipf are the key distributions of Options.Distribution.
const (
	Uniform = "uniform"
	Zipf    = "zipf"
)

// ErrInvalidOptions is wrapped by every error of Options.Validate.
var ErrInvalidOptions = errors.New("invalid load options")

// Options describes a load run. The zero value of every field except Domain
// and Descriptors works: Run replaces it with the matching Default constant.
type Options struct {
	// Addr is the RateLimitService address, host:port.
	Addr string
	// Domain is the domain of every request.
	Domain string
	// Descriptors are descriptor templates "k=v,k2=v2", one descriptor per
	// template in every request; "{key}" in a key or value is replaced by
	// the chosen key number.
	Descriptors []string
	// Keys is the number of distinct keys, numbered 0 to Keys-1.
	Keys int
	// Distribution is Uniform or Zipf.
	Distribution string
	// ZipfS is the Zipf exponent s, greater than 1; key k is chosen with a
	// probability proportional to (k+1)^-s.
	ZipfS float64
	// Concurrency is the number of workers: requests in flight in the closed
	// loop, the most requests in flight in the open loop.
	Concurrency int
	// Conns is the number of gRPC connections; worker i uses connection
	// i mod Conns.
	Conns int
	// Rate is the open-loop rate in requests per second; 0 selects the
	// closed loop.
	Rate float64
	// Duration is the measured run time after the warm-up. When both
	// Duration and Requests are zero it defaults to DefaultDuration; when
	// both are set the run ends at whichever limit comes first.
	Duration time.Duration
	// Requests is the number of measured requests after the warm-up; 0
	// means the run is bounded by Duration only.
	Requests int64
	// Warmup is a time during which requests are sent but not recorded.
	Warmup time.Duration
	// Hits is the request's hits_addend; 0 means 1 to the service.
	Hits uint32
	// Timeout is the deadline of each call.
	Timeout time.Duration
	// Seed seeds the key choice. Worker i draws from its own generator
	// seeded with (Seed, i), so a run's key sequences are reproducible.
	Seed uint64
	// TLS is how the connections dial; the zero value dials plain text.
	TLS rlsclient.TLS
	// KeyWindow, when positive, counts every key's OK and OVER_LIMIT
	// answers per window of this length, aligned to the Unix epoch by
	// the time each call was sent, warm-up included, into
	// Result.KeyCounts: what a judge of a limit's accuracy needs of a
	// run. It costs a map update per answer, and memory and output per
	// key and window seen.
	KeyWindow time.Duration
}

// Flags registers the options as command-line flags on fs, with the Default
// constants as defaults. pflag long flags take two dashes (--addr, --keys);
// -c and -n are shorthands of --concurrency and --requests.
func (o *Options) Flags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Addr, "addr", DefaultAddr, "RateLimitService address host:port")
	fs.StringVar(&o.Domain, "domain", "", "domain of every request (required)")
	fs.StringArrayVar(&o.Descriptors, "descriptor", nil,
		`descriptor template k=v,k2=v2 in which {key} becomes the key number; repeat for several descriptors per request (required)`)
	fs.IntVar(&o.Keys, "keys", DefaultKeys, "number of distinct keys; {key} takes the values 0 to keys-1")
	fs.StringVar(&o.Distribution, "dist", DefaultDistribution, "key choice: uniform, or zipf (key 0 the most frequent)")
	fs.Float64Var(&o.ZipfS, "zipf-s", DefaultZipfS, "Zipf exponent, greater than 1; larger is more skewed")
	fs.IntVarP(&o.Concurrency, "concurrency", "c", DefaultConcurrency,
		"workers: requests in flight (closed loop) or the most in flight (open loop)")
	fs.IntVar(&o.Conns, "conns", DefaultConns, "gRPC connections; workers are spread over them round-robin")
	fs.Float64Var(&o.Rate, "rate", 0,
		"open loop: requests per second on a fixed schedule, latency measured from the scheduled time (0: closed loop)")
	fs.DurationVar(&o.Duration, "duration", 0,
		"measured run time after the warm-up (10s when neither --duration nor -n is given)")
	fs.Int64VarP(&o.Requests, "requests", "n", 0,
		"measured requests after the warm-up; with --duration the run ends at whichever comes first")
	fs.DurationVar(&o.Warmup, "warmup", 0, "time during which requests are sent but not recorded")
	fs.Uint32Var(&o.Hits, "hits", 0, "request hits_addend (0 means 1)")
	fs.DurationVar(&o.Timeout, "timeout", DefaultTimeout, "deadline of each call")
	fs.Uint64Var(&o.Seed, "seed", 0, "seed of the key choice")
	fs.DurationVar(&o.KeyWindow, "key-window", 0,
		"count each key's OK and OVER_LIMIT answers per window of this length, by send time, warm-up included, into key_counts (0: off)")
	o.TLS.Flags(fs)
}

// withDefaults returns o with zero fields replaced by their defaults.
func (o Options) withDefaults() Options {
	if o.Addr == "" {
		o.Addr = DefaultAddr
	}
	if o.Keys == 0 {
		o.Keys = DefaultKeys
	}
	if o.Distribution == "" {
		o.Distribution = DefaultDistribution
	}
	if o.ZipfS == 0 {
		o.ZipfS = DefaultZipfS
	}
	if o.Concurrency == 0 {
		o.Concurrency = DefaultConcurrency
	}
	if o.Conns == 0 {
		o.Conns = DefaultConns
	}
	if o.Duration == 0 && o.Requests == 0 {
		o.Duration = DefaultDuration
	}
	if o.Timeout == 0 {
		o.Timeout = DefaultTimeout
	}
	return o
}

// Validate reports every invalid option at once; the error wraps
// ErrInvalidOptions. Zero values that Run replaces by defaults are valid.
func (o *Options) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }

	if o.Domain == "" {
		bad("--domain is required")
	}
	if len(o.Descriptors) == 0 {
		bad("at least one --descriptor is required")
	}
	for _, d := range o.Descriptors {
		if _, err := parseTemplate(d); err != nil {
			bad("--descriptor %q: %v", d, err)
		}
	}
	if o.Keys < 0 {
		bad("--keys must be at least 1, got %d", o.Keys)
	}
	switch o.Distribution {
	case "", Uniform:
	case Zipf:
		if o.ZipfS != 0 && (!(o.ZipfS > 1) || math.IsInf(o.ZipfS, 1)) {
			bad("--zipf-s must be a finite number greater than 1, got %g", o.ZipfS)
		}
	default:
		bad("--dist %q is unknown (want %s or %s)", o.Distribution, Uniform, Zipf)
	}
	if o.Concurrency < 0 {
		bad("--concurrency (-c) must be at least 1, got %d", o.Concurrency)
	}
	if o.Conns < 0 {
		bad("--conns must be at least 1, got %d", o.Conns)
	}
	if d := o.withDefaults(); o.Concurrency >= 0 && o.Conns >= 0 && d.Conns > d.Concurrency {
		bad("--conns %d exceeds --concurrency (-c) %d: connections without a worker would stay idle", d.Conns, d.Concurrency)
	}
	if o.Rate < 0 || math.IsNaN(o.Rate) || math.IsInf(o.Rate, 0) {
		bad("--rate must be a finite number of requests per second, 0 for the closed loop, got %g", o.Rate)
	}
	if o.Duration < 0 {
		bad("--duration must not be negative, got %s", o.Duration)
	}
	if o.Requests < 0 {
		bad("--requests (-n) must not be negative, got %d", o.Requests)
	}
	if o.Warmup < 0 {
		bad("--warmup must not be negative, got %s", o.Warmup)
	}
	if o.Timeout < 0 {
		bad("--timeout must not be negative, got %s", o.Timeout)
	}
	if o.KeyWindow < 0 {
		bad("--key-window must not be negative, got %s", o.KeyWindow)
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", ErrInvalidOptions, errors.Join(errs...))
	}
	return nil
}

// MarshalJSON writes the options with durations as strings such as "10s".
func (o Options) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Addr         string   `json:"addr"`
		Domain       string   `json:"domain"`
		Descriptors  []string `json:"descriptors"`
		Keys         int      `json:"keys"`
		Distribution string   `json:"distribution"`
		ZipfS        float64  `json:"zipf_s"`
		Concurrency  int      `json:"concurrency"`
		Conns        int      `json:"conns"`
		Rate         float64  `json:"rate"`
		Duration     string   `json:"duration"`
		Requests     int64    `json:"requests"`
		Warmup       string   `json:"warmup"`
		Hits         uint32   `json:"hits"`
		Timeout      string   `json:"timeout"`
		Seed         uint64   `json:"seed"`
		TLS          bool     `json:"tls,omitempty"`
		KeyWindow    string   `json:"key_window,omitempty"`
	}{
		o.Addr, o.Domain, o.Descriptors, o.Keys, o.Distribution, o.ZipfS, o.Concurrency, o.Conns, o.Rate,
		o.Duration.String(), o.Requests, o.Warmup.String(), o.Hits, o.Timeout.String(), o.Seed,
		o.TLS != (rlsclient.TLS{}), keyWindowString(o.KeyWindow),
	})
}

// keyWindowString is the JSON form of Options.KeyWindow: empty when off.
func keyWindowString(d time.Duration) string {
	if d <= 0 {
		return ""
	}
	return d.String()
}
