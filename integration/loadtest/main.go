// Command loadtest measures tollgate on Redis the way the Redis-store issue
// asks: tollgate pinned to one core, redis-server and the load generator to
// the other; three runs of each scenario, medians reported, with the CPU
// time per decision of tollgate and of Redis read from /proc. tollgate runs
// with a store timeout of one second, so that Redis makes every decision;
// a scenario answered by a failure mode (degraded) fails the run.
//
// A second section, overlimit, sends traffic that is entirely over its
// limit to two tollgates on one Redis, one without and one with the
// over-limit cache (--over-limit-cache-bytes), in alternating runs, and
// reports each one's medians and resident memory.
//
// A third section, cached, measures leased budgets (precision: cached)
// beside strict decisions and the floor, on three tollgates over one
// Redis: each load strict and cached in turn (Zipf and uniform keys, a
// limit nobody reaches, and an API mix split over the three), with
// throughput as a share of the floor's, the decisions made without a
// Redis round trip, Redis script calls and CPU per decision, every latency
// percentile, and the accuracy of the same runs (see accuracy.go).
//
// With -redis-latency, the cached section runs again with Redis that far
// from the tollgates, behind a latency proxy (toxiproxy, run by this
// program itself with -serve-proxy, pinned beside Redis).
//
// A fourth section, flood, floods tollgate with unique keys and samples its
// resident memory, to check that the memory of the memory store and of the
// local fallback of an unreachable Redis follows their key caps, not the
// flood.
//
// Run it with `make bench` (or `go run ./integration/loadtest`, `-only
// overlimit` for one section); it builds nothing itself and expects
// bin/tollgate.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

const rules = `domain: bench
descriptors:
  - key: api_key
    rate_limit: {unit: second, requests_per_unit: 1000, algorithm: token_bucket}
  - key: over
    rate_limit: {unit: hour, requests_per_unit: 1}
`

// floodRules is the configuration of the flood: a token bucket on api_key
// that one hit keeps for six minutes, so that every key the flood sends
// stays in the store unless the key cap evicts it. (At 1000 a second, a
// counter is full again, and dropped, a millisecond after its hit.)
const floodRules = `domain: bench
descriptors:
  - key: api_key
    rate_limit: {unit: hour, requests_per_unit: 10, algorithm: token_bucket}
`

// clockTick is the unit of utime and stime in /proc/PID/stat (USER_HZ).
const clockTick = 10 * time.Millisecond

// The sections of the load test, in the order they run.
const (
	sectionRedis = "redis"
	sectionFlood = "flood"
)

// config is what the flags choose.
type config struct {
	bin           string
	duration      time.Duration // each Redis scenario run
	runs          int
	floodDuration time.Duration
	sections      map[string]bool
	// latencies are the round trips added between the cached section's
	// tollgates and Redis, one pass of the section each; 0 is none.
	latencies []time.Duration
}

func main() {
	cfg, proxy, err := parseFlags(os.Args[1:])
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "loadtest:", err)
		}
		os.Exit(2)
	}
	if proxy.target != "" {
		if err := serveProxy(proxy.target, proxy.latency); err != nil {
			fmt.Fprintln(os.Stderr, "loadtest:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(cfg); err != nil {
		fmt.Fprintln(os.Stderr, "loadtest:", err)
		os.Exit(1)
	}
}

// proxyRequest is what -serve-proxy asks: serve a latency proxy instead
// of load testing.
type proxyRequest struct {
	target  string
	latency time.Duration
}

// parseFlags reads the command line.
func parseFlags(args []string) (config, proxyRequest, error) {
	var cfg config
	var proxy proxyRequest
	fs, only, latencies := newFlagSet(&cfg, &proxy)
	if err := fs.Parse(args); err != nil {
		return cfg, proxy, err
	}
	if fs.NArg() > 0 {
		return cfg, proxy, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	var err error
	if cfg.sections, err = parseSections(*only); err != nil {
		return cfg, proxy, err
	}
	if cfg.latencies, err = parseLatencies(*latencies); err != nil {
		return cfg, proxy, err
	}
	return cfg, proxy, nil
}

// newFlagSet returns the load test's flags, which set cfg and proxy but
// for -only and -redis-latency, returned unparsed.
func newFlagSet(cfg *config, proxy *proxyRequest) (fs *flag.FlagSet, only, latencies *string) {
	fs = flag.NewFlagSet("loadtest", flag.ContinueOnError)
	fs.StringVar(&cfg.bin, "bin", "bin/tollgate", "the tollgate binary")
	fs.DurationVar(&cfg.duration, "duration", 8*time.Second, "length of each measured run of a Redis scenario")
	fs.IntVar(&cfg.runs, "runs", 3, "runs per Redis scenario; the median is reported")
	fs.DurationVar(&cfg.floodDuration, "flood-duration", 15*time.Second, "length of each unique-key flood")
	only = fs.String("only", "", "comma-separated sections to run: redis, overlimit, cached, flood (default: all)")
	latencies = fs.String("redis-latency", "0", "cached section: comma-separated round trips to add between tollgate and Redis through a latency proxy, one pass each; 0 is direct (e.g. 0,0.5ms,2ms)")
	fs.StringVar(&proxy.target, "serve-proxy", "", "internal: serve a latency proxy in front of this address (see -proxy-latency), print its address and run until stdin closes")
	fs.DurationVar(&proxy.latency, "proxy-latency", 0, "internal: the round trip -serve-proxy adds")
	return fs, only, latencies
}

// parseSections reads the -only flag; empty selects every section.
func parseSections(only string) (map[string]bool, error) {
	sections := map[string]bool{}
	all := []string{sectionRedis, sectionOverLimit, sectionCached, sectionFlood}
	if only == "" {
		only = strings.Join(all, ",")
	}
	for name := range strings.SplitSeq(only, ",") {
		name = strings.TrimSpace(name)
		if !slices.Contains(all, name) {
			return nil, fmt.Errorf("-only: unknown section %q (want one of %s)", name, strings.Join(all, ", "))
		}
		sections[name] = true
	}
	return sections, nil
}

// parseLatencies reads the -redis-latency flag.
func parseLatencies(list string) ([]time.Duration, error) {
	var out []time.Duration
	for field := range strings.SplitSeq(list, ",") {
		field = strings.TrimSpace(field)
		d, err := time.ParseDuration(field)
		if field == "0" {
			d, err = 0, nil
		}
		if err != nil || d < 0 {
			return nil, fmt.Errorf("-redis-latency: %q is not a duration of 0 or more", field)
		}
		if slices.Contains(out, d) {
			return nil, fmt.Errorf("-redis-latency: %v given twice", d)
		}
		out = append(out, d)
	}
	return out, nil
}

// scenario is one load shape.
type scenario struct {
	name string
	args []string
}

// benchCounts is what the load test reads of tollgate bench's counts.
type benchCounts struct {
	Requests  int64   `json:"requests"`
	RPS       float64 `json:"rps"`
	OK        int64   `json:"ok"`
	OverLimit int64   `json:"over_limit"`
	Errors    int64   `json:"errors"`
	Degraded  int64   `json:"degraded"`
}

// measurement is one run of a scenario.
type measurement struct {
	benchCounts
	P50us          float64 `json:"p50_us"`
	P99us          float64 `json:"p99_us"`
	P999us         float64 `json:"p999_us"`
	ServiceUSPerOp float64 `json:"service_cpu_us_per_decision"`
	RedisUSPerOp   float64 `json:"redis_cpu_us_per_decision"`
	HandlingP99us  float64 `json:"service_handling_p99_us"`
}

// run runs the chosen sections and prints one JSON report: each Redis
// scenario under its name, and the flood section under "flood".
func run(cfg config) error {
	dir, err := os.MkdirTemp("", "tollgate-loadtest")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if err := os.WriteFile(filepath.Join(dir, "bench.yaml"), []byte(rules), 0o600); err != nil {
		return err
	}
	report := map[string]any{}
	if cfg.sections[sectionRedis] {
		scenarios, err := runRedis(cfg, dir)
		if err != nil {
			return err
		}
		for name, m := range scenarios {
			report[name] = m
		}
	}
	if cfg.sections[sectionOverLimit] {
		over, err := runOverLimit(cfg, dir)
		if err != nil {
			return err
		}
		report[sectionOverLimit] = over
	}
	if cfg.sections[sectionCached] {
		cached, err := runCached(cfg, dir)
		if err != nil {
			return err
		}
		report[sectionCached] = cached
	}
	if cfg.sections[sectionFlood] {
		flood, err := runFlood(cfg, dir)
		if err != nil {
			return err
		}
		report[sectionFlood] = flood
	}
	out, _ := json.MarshalIndent(report, "", "  ")
	fmt.Println(string(out))
	return nil
}

// runRedis measures the Redis scenarios and returns the median of each. It
// fails if any answer was degraded: with a one-second store timeout, Redis
// must have made every decision.
func runRedis(cfg config, dir string) (map[string]measurement, error) {
	redis, redisAddr, err := startRedis(dir, "redis.log")
	if err != nil {
		return nil, err
	}
	defer stop(redis)
	svc, grpcAddr, httpAddr, err := startTollgate(cfg, dir, dir, "tollgate.log", redisAddr)
	if err != nil {
		return nil, err
	}
	defer stop(svc)

	base := []string{"--addr", grpcAddr, "--domain", "bench", "--keys", "10000",
		"--duration", cfg.duration.String(), "--warmup", "2s"}
	scenarios := []scenario{
		{"closed loop c=64, token bucket, 10 000 keys", append(slices.Clone(base), "--descriptor", "api_key=k{key}", "-c", "64", "--conns", "4")},
		// Ordinary load: most decisions are a round trip of their own, so
		// Redis's CPU per decision is its cost per script call.
		{"open loop 2000/s, token bucket", append(slices.Clone(base), "--descriptor", "api_key=k{key}", "--rate", "2000", "-c", "64", "--conns", "4")},
		{"open loop 5000/s, token bucket", append(slices.Clone(base), "--descriptor", "api_key=k{key}", "--rate", "5000", "-c", "64", "--conns", "4")},
		{"open loop 5000/s, no rule matches (floor)", append(slices.Clone(base), "--descriptor", "nomatch=k{key}", "--rate", "5000", "-c", "64", "--conns", "4")},
	}
	report := map[string]measurement{}
	for _, sc := range scenarios {
		var ms []measurement
		for i := range cfg.runs {
			m, err := measure(cfg.bin, sc, svc.Process.Pid, redis.Process.Pid, "http://"+httpAddr+"/metrics")
			if err != nil {
				return nil, fmt.Errorf("%s, run %d: %w", sc.name, i+1, err)
			}
			fmt.Fprintf(os.Stderr, "%s, run %d: %.0f decisions/s, p99 %.0f µs, service %.1f µs/decision, redis %.1f µs/decision, handling p99 ≤ %.0f µs, %d degraded\n",
				sc.name, i+1, m.RPS, m.P99us, m.ServiceUSPerOp, m.RedisUSPerOp, m.HandlingP99us, m.Degraded)
			if m.Degraded > 0 {
				return nil, fmt.Errorf("%s, run %d: %d of %d answers degraded: a failure mode decided, not Redis; tollgate log:\n%s",
					sc.name, i+1, m.Degraded, m.Requests, tail(filepath.Join(dir, "tollgate.log")))
			}
			ms = append(ms, m)
		}
		report[sc.name] = median(ms)
	}
	return report, nil
}

// measure runs the load generator once, pinned to core 0 beside Redis.
func measure(bin string, sc scenario, svcPid, redisPid int, metricsURL string) (measurement, error) {
	before, err := handlingHistogram(metricsURL)
	if err != nil {
		return measurement{}, err
	}
	svc0, redis0 := cpuTime(svcPid), cpuTime(redisPid)
	var stdout bytes.Buffer
	cmd := exec.Command("taskset", append([]string{"-c", "0", bin, "bench"}, sc.args...)...)
	cmd.Stdout, cmd.Stderr = &stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		return measurement{}, fmt.Errorf("tollgate bench: %w", err)
	}
	svcCPU, redisCPU := cpuTime(svcPid)-svc0, cpuTime(redisPid)-redis0
	after, err := handlingHistogram(metricsURL)
	if err != nil {
		return measurement{}, err
	}
	var res struct {
		benchCounts
		WarmupRequests int64 `json:"warmup_requests"`
		Latency        struct {
			P50  float64 `json:"p50"`
			P99  float64 `json:"p99"`
			P999 float64 `json:"p999"`
		} `json:"latency_us"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &res); err != nil {
		return measurement{}, fmt.Errorf("reading tollgate bench output: %w", err)
	}
	// The warm-up's requests were served too, so they share the CPU time.
	served := float64(res.Requests + res.WarmupRequests)
	return measurement{
		benchCounts: res.benchCounts,
		P50us:       res.Latency.P50, P99us: res.Latency.P99, P999us: res.Latency.P999,
		ServiceUSPerOp: float64(svcCPU.Microseconds()) / served,
		RedisUSPerOp:   float64(redisCPU.Microseconds()) / served,
		HandlingP99us:  quantileBound(before, after, 0.99) * 1e6,
	}, nil
}

// floodKeys is the key space of the flood: large enough that nearly every
// request carries a key tollgate has not seen.
const floodKeys = 50_000_000

// floodCase is one tollgate configuration flooded with unique keys.
type floodCase struct {
	name    string
	maxKeys int
	// degraded is whether a failure mode answers, not the store.
	degraded bool
	// serve returns the store flags of `tollgate serve`; deadRedis is an
	// address where nothing listens.
	serve func(deadRedis string) []string
}

// floodReport is the flood section of the report.
type floodReport struct {
	Load string        `json:"load"`
	Runs []floodResult `json:"runs"`
}

// floodResult is tollgate's resident memory during one flood. Sizes are in
// MiB.
type floodResult struct {
	Config  string `json:"config"`
	MaxKeys int    `json:"max_keys"`
	benchCounts
	RSSBefore float64   `json:"rss_before_mib"`
	RSSPeak   float64   `json:"rss_peak_mib"`
	RSSEnd    float64   `json:"rss_end_mib"`
	Samples   []float64 `json:"rss_samples_mib"`
}

// runFlood floods each configuration in turn with unique keys. It writes
// the flood's rules and the logs under dir.
func runFlood(cfg config, dir string) (*floodReport, error) {
	configDir := filepath.Join(dir, "flood")
	if err := os.Mkdir(configDir, 0o700); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(configDir, "bench.yaml"), []byte(floodRules), 0o600); err != nil {
		return nil, err
	}
	cases := []floodCase{
		{"memory store", 100_000, false, func(string) []string {
			return []string{"--store", "memory", "--memory-max-keys", "100000"}
		}},
		{"memory store", 1_000_000, false, func(string) []string {
			return []string{"--store", "memory", "--memory-max-keys", "1000000"}
		}},
		{"redis unreachable, failure mode local", 100_000, true, func(deadRedis string) []string {
			return []string{"--store", "redis", "--redis-addrs", deadRedis,
				"--failure-mode", "local", "--local-fallback-max-keys", "100000"}
		}},
	}
	load := []string{"--descriptor", "api_key=k{key}", "--keys", strconv.Itoa(floodKeys), "--dist", "uniform",
		"-c", "32", "--conns", "2", "--duration", cfg.floodDuration.String()}
	report := &floodReport{Load: "tollgate bench --domain bench " + strings.Join(load, " ")}
	for i, fc := range cases {
		r, err := flood(cfg.bin, configDir, dir, fmt.Sprintf("tollgate-flood-%d.log", i), fc, load)
		if err != nil {
			return nil, fmt.Errorf("flood, %s, %d keys: %w", fc.name, fc.maxKeys, err)
		}
		// Every answer is degraded, or none: otherwise the run did not
		// measure the store it names.
		want := int64(0)
		if fc.degraded {
			want = r.OK + r.OverLimit
		}
		if r.Degraded != want {
			return nil, fmt.Errorf("flood, %s, %d keys: %d answers degraded, want %d", fc.name, fc.maxKeys, r.Degraded, want)
		}
		fmt.Fprintf(os.Stderr, "flood, %s, %d keys: %d requests (%.0f/s, %d degraded, %d errors), RSS before %.1f MiB, peak %.1f MiB, end %.1f MiB\n",
			fc.name, fc.maxKeys, r.Requests, r.RPS, r.Degraded, r.Errors, r.RSSBefore, r.RSSPeak, r.RSSEnd)
		report.Runs = append(report.Runs, r)
	}
	return report, nil
}

// flood starts tollgate on configDir as fc describes, pinned to core 1 and
// logging to logName in logDir, floods it from core 0 and samples its VmRSS
// once a second.
func flood(bin, configDir, logDir, logName string, fc floodCase, load []string) (floodResult, error) {
	ports, err := freePorts(3)
	if err != nil {
		return floodResult{}, err
	}
	grpcAddr := fmt.Sprintf("127.0.0.1:%d", ports[0])
	httpAddr := fmt.Sprintf("127.0.0.1:%d", ports[1])
	deadRedis := fmt.Sprintf("127.0.0.1:%d", ports[2]) // closed again by freePorts
	args := append([]string{"-c", "1", bin, "serve", "--config-dir", configDir,
		"--grpc-addr", grpcAddr, "--http-addr", httpAddr, "--debug-addr", "", "--log-level", "error"},
		fc.serve(deadRedis)...)
	svc, err := start(logDir, logName, "taskset", args...)
	if err != nil {
		return floodResult{}, err
	}
	defer stop(svc)
	if err := waitReady("http://" + httpAddr + "/readyz"); err != nil {
		return floodResult{}, fmt.Errorf("%w; tollgate log:\n%s", err, tail(filepath.Join(logDir, logName)))
	}
	pid := svc.Process.Pid
	before, err := vmRSS(pid)
	if err != nil {
		return floodResult{}, err
	}

	ctx, cancel := context.WithCancel(context.Background())
	samples := make(chan []float64, 1)
	go func() { samples <- sampleRSS(ctx, pid) }()
	var stdout bytes.Buffer
	cmd := exec.Command("taskset", append([]string{"-c", "0", bin, "bench", "--addr", grpcAddr, "--domain", "bench"}, load...)...)
	cmd.Stdout, cmd.Stderr = &stdout, os.Stderr
	runErr := cmd.Run()
	cancel()
	sampled := <-samples
	if runErr != nil {
		return floodResult{}, fmt.Errorf("tollgate bench: %w; tollgate log:\n%s", runErr, tail(filepath.Join(logDir, logName)))
	}
	end, err := vmRSS(pid)
	if err != nil {
		return floodResult{}, fmt.Errorf("%w; tollgate log:\n%s", err, tail(filepath.Join(logDir, logName)))
	}
	var res benchCounts
	if err := json.Unmarshal(stdout.Bytes(), &res); err != nil {
		return floodResult{}, fmt.Errorf("reading tollgate bench output: %w", err)
	}
	res.RPS = math.Round(res.RPS)
	r := floodResult{
		Config: fc.name, MaxKeys: fc.maxKeys, benchCounts: res,
		RSSBefore: mib(before), RSSEnd: mib(end), Samples: sampled,
	}
	r.RSSPeak = max(r.RSSEnd, slices.Max(append([]float64{r.RSSBefore}, sampled...)))
	return r, nil
}

// sampleRSS reads the VmRSS of pid once a second until ctx ends, in MiB.
func sampleRSS(ctx context.Context, pid int) []float64 {
	var out []float64
	tick := time.NewTicker(time.Second) // the sampling interval
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return out
		case <-tick.C:
			if kb, err := vmRSS(pid); err == nil {
				out = append(out, mib(kb))
			}
		}
	}
}

// vmRSS returns the resident set size of a process in KiB, from the VmRSS
// line of /proc/PID/status.
func vmRSS(pid int) (int64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("reading the memory of process %d: %w", pid, err)
	}
	for line := range strings.Lines(string(data)) {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("process %d: VmRSS line %q: %w", pid, strings.TrimSpace(line), err)
			}
			return kb, nil
		}
	}
	return 0, fmt.Errorf("process %d: no VmRSS in /proc/%d/status", pid, pid)
}

// mib converts KiB to MiB, rounded to a tenth.
func mib(kb int64) float64 {
	return math.Round(float64(kb)/1024*10) / 10
}

// histogram is a cumulative Prometheus histogram: upper bound → count.
type histogram map[float64]float64

// handlingHistogram scrapes tollgate's own check-duration histogram.
func handlingHistogram(url string) (histogram, error) {
	resp, err := http.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	h := histogram{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "tollgate_check_duration") || !strings.Contains(line, "_bucket{") {
			continue
		}
		_, rest, _ := strings.Cut(line, `le="`)
		le, rest, _ := strings.Cut(rest, `"`)
		fields := strings.Fields(rest)
		bound, err1 := strconv.ParseFloat(le, 64)
		count, err2 := strconv.ParseFloat(fields[len(fields)-1], 64)
		if err1 != nil || err2 != nil {
			continue
		}
		h[bound] += count // summed over every attribute set
	}
	return h, sc.Err()
}

// quantileBound returns the upper bound of the bucket holding quantile q of
// the observations made between two scrapes.
func quantileBound(before, after histogram, q float64) float64 {
	bounds := make([]float64, 0, len(after))
	for b := range after {
		bounds = append(bounds, b)
	}
	slices.Sort(bounds)
	if len(bounds) == 0 {
		return math.NaN()
	}
	total := after[bounds[len(bounds)-1]] - before[bounds[len(bounds)-1]]
	for _, b := range bounds {
		if after[b]-before[b] >= q*total {
			return b
		}
	}
	return math.Inf(1)
}

// cpuTime returns the user plus system CPU time a process has used.
func cpuTime(pid int) time.Duration {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// Fields after the parenthesised command name; utime and stime are the
	// 14th and 15th fields of the whole line.
	_, rest, _ := bytes.Cut(data, []byte(") "))
	f := strings.Fields(string(rest))
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * clockTick
}

func median(ms []measurement) measurement {
	pick := func(get func(measurement) float64) float64 {
		vs := make([]float64, len(ms))
		for i, m := range ms {
			vs[i] = get(m)
		}
		slices.Sort(vs)
		return vs[len(vs)/2]
	}
	return measurement{
		benchCounts: benchCounts{
			Requests:  int64(pick(func(m measurement) float64 { return float64(m.Requests) })),
			RPS:       pick(func(m measurement) float64 { return m.RPS }),
			OK:        int64(pick(func(m measurement) float64 { return float64(m.OK) })),
			OverLimit: int64(pick(func(m measurement) float64 { return float64(m.OverLimit) })),
			Errors:    int64(pick(func(m measurement) float64 { return float64(m.Errors) })),
			Degraded:  int64(pick(func(m measurement) float64 { return float64(m.Degraded) })),
		},
		P50us:          pick(func(m measurement) float64 { return m.P50us }),
		P99us:          pick(func(m measurement) float64 { return m.P99us }),
		P999us:         pick(func(m measurement) float64 { return m.P999us }),
		ServiceUSPerOp: pick(func(m measurement) float64 { return m.ServiceUSPerOp }),
		RedisUSPerOp:   pick(func(m measurement) float64 { return m.RedisUSPerOp }),
		HandlingP99us:  pick(func(m measurement) float64 { return m.HandlingP99us }),
	}
}

func freePorts(n int) ([]int, error) {
	var ports []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// startRedis starts redis-server without persistence on a free port,
// pinned to core 0 beside the load generator.
func startRedis(dir, logName string) (cmd *exec.Cmd, addr string, err error) {
	ports, err := freePorts(1)
	if err != nil {
		return nil, "", err
	}
	cmd, err = start(dir, logName, "taskset", "-c", "0", "redis-server", "--bind", "127.0.0.1",
		"--port", strconv.Itoa(ports[0]), "--save", "", "--appendonly", "no")
	return cmd, fmt.Sprintf("127.0.0.1:%d", ports[0]), err
}

// startTollgate starts `tollgate serve` on free ports, pinned to core 1,
// serving configDir and counting in the Redis at redisAddr, with the
// extra flags, and waits until it is ready.
func startTollgate(cfg config, dir, configDir, logName, redisAddr string, extra ...string) (cmd *exec.Cmd, grpcAddr, httpAddr string, err error) {
	ports, err := freePorts(2)
	if err != nil {
		return nil, "", "", err
	}
	grpcAddr, httpAddr = fmt.Sprintf("127.0.0.1:%d", ports[0]), fmt.Sprintf("127.0.0.1:%d", ports[1])
	args := append([]string{"-c", "1", cfg.bin, "serve", "--config-dir", configDir,
		"--store", "redis", "--redis-addrs", redisAddr, "--store-timeout", "1s",
		"--grpc-addr", grpcAddr, "--http-addr", httpAddr, "--debug-addr", "", "--log-level", "warn"}, extra...)
	if cmd, err = start(dir, logName, "taskset", args...); err != nil {
		return nil, "", "", err
	}
	if err := waitReady("http://" + httpAddr + "/readyz"); err != nil {
		stop(cmd)
		return nil, "", "", fmt.Errorf("%w; tollgate log:\n%s", err, tail(filepath.Join(dir, logName)))
	}
	return cmd, grpcAddr, httpAddr, nil
}

func start(dir, logName string, name string, args ...string) (*exec.Cmd, error) {
	log, err := os.Create(filepath.Join(dir, logName))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	return cmd, nil
}

func stop(cmd *exec.Cmd) {
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
}

func waitReady(url string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	for ctx.Err() == nil {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(50 * time.Millisecond) // polling interval
	}
	return errors.New("tollgate did not become ready within 15s")
}

func tail(path string) string {
	data, _ := os.ReadFile(path)
	if len(data) > 2000 {
		data = data[len(data)-2000:]
	}
	return string(data)
}
