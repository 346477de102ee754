package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/tollgatehq/tollgate/pkg/loadgen"
)

// sectionCached measures leased budgets (precision: cached) beside strict
// decisions and the floor, on three tollgates over one Redis, pinned as
// the Redis section pins them: each scenario strict and cached in turn,
// with the accuracy of every run.
const sectionCached = "cached"

// cachedRules adds to rules the limits of the cached section, each strict
// and cached: a token bucket of 10^9 a second that nobody reaches, and the
// API mix's pair of limits on one descriptor.
const cachedRules = rules + `  - key: cached_key
    rate_limit: {unit: second, requests_per_unit: 1000, algorithm: token_bucket, precision: cached}
  - key: huge_key
    rate_limit: {unit: second, requests_per_unit: 1000000000, algorithm: token_bucket}
  - key: huge_cached_key
    rate_limit: {unit: second, requests_per_unit: 1000000000, algorithm: token_bucket, precision: cached}
  - key: mix_key
    rate_limits:
      - {unit: minute, requests_per_unit: 1000, algorithm: fixed_window}
      - {unit: second, requests_per_unit: 20, burst: 40, algorithm: token_bucket}
  - key: mix_cached_key
    rate_limits:
      - {unit: minute, requests_per_unit: 1000, algorithm: fixed_window, precision: cached}
      - {unit: second, requests_per_unit: 20, burst: 40, algorithm: token_bucket, precision: cached}
`

// The limits of cachedRules, for the judge.
var (
	bucket1000 = []judgedLimit{{requests: 1000, period: time.Second}}
	bucketHuge = []judgedLimit{{requests: 1_000_000_000, period: time.Second}}
	mixLimits  = []judgedLimit{
		{fixedWindow: true, requests: 1000, period: time.Minute},
		{requests: 20, period: time.Second, burst: 40},
	}
)

// cachedInstances is the number of tollgates the section starts on the
// one Redis; the API mix splits its load over all of them, the other
// scenarios load the first.
const cachedInstances = 3

// The API mix's saturated clients: mixHot clients, each sending three
// times its bucket's rate (20/s), split over the instances.
const (
	mixHot     = 5
	mixHotRate = 3 * 20 * mixHot // requests a second, all clients
)

// cachedLoad is one load process of a scenario: tollgate bench's
// arguments without --addr, against one instance. In the descriptor,
// {run} becomes a token unique to the run, so that every run counts on
// fresh keys.
type cachedLoad struct {
	instance int
	args     []string
	// hot marks the saturated clients' load, judged by capacity.
	hot bool
}

// cachedScenario is one row of the section: a group of load shapes run
// strict and cached (or the floor, with no rule matched).
type cachedScenario struct {
	name      string // the row's name, unique
	group     string // the load shape and limits, shared by its strict and cached rows
	floor     string // the group of the floor of the same load
	precision string // strict, cached, or floor
	open      bool   // an open loop
	loads     []cachedLoad
	limits    []judgedLimit // nil: no accuracy (the floor)
	// ceiling is the limit a token bucket's local ceiling is computed
	// for (see localCeiling); 0: none.
	ceiling float64
}

// cachedResult is the median of a scenario's runs, with its decision
// paths, its throughput as a share of the same load's floor and the
// worst accuracy of its runs.
type cachedResult struct {
	measurement
	Group        string  `json:"group"`
	Precision    string  `json:"precision"`
	RedisLatency string  `json:"redis_latency"`
	LocalShare   float64 `json:"local_share"`
	OfFloor      float64 `json:"of_floor"`
	// LocalCeiling is the most LocalShare could be at the scenario's rate
	// (see localCeiling); 0 for scenarios without a ceiling.
	LocalCeiling  float64   `json:"local_ceiling,omitempty"`
	P99OfFloor    float64   `json:"p99_of_floor"`
	DecisionPath  string    `json:"decision_paths"`
	ScriptCalls   float64   `json:"redis_script_calls_per_decision"`
	P90us         float64   `json:"p90_us"`
	MaxUs         float64   `json:"max_us"`
	HandlingP50us float64   `json:"service_handling_p50_us"`
	HandlingP90us float64   `json:"service_handling_p90_us"`
	HandlingP999  float64   `json:"service_handling_p999_us"`
	Accuracy      *accuracy `json:"accuracy,omitempty"`
}

// cachedRun is one run of a scenario.
type cachedRun struct {
	measurement
	p90us, maxUs       float64
	handling           [4]float64 // p50, p90, p99, p99.9 bounds, µs
	local, scriptCalls float64
	paths              map[string]float64
	accuracy           *accuracy
}

// cachedScenarios returns the section's scenarios in the order of a
// round: per load shape its floor, then strict, then cached.
func cachedScenarios(cfg config) []cachedScenario {
	base := []string{"--domain", "bench", "--duration", cfg.duration.String(), "--warmup", "2s",
		"--key-window", keyWindow.String()}
	one := func(args ...string) []cachedLoad {
		return []cachedLoad{{instance: 0, args: slices.Concat(base, []string{"-c", "64", "--conns", "4"}, args)}}
	}
	zipf10k := []string{"--keys", "10000", "--dist", "zipf", "--zipf-s", "1.1"}
	uniform100k := []string{"--keys", "100000"}
	uniform10k := []string{"--keys", "10000"}
	open := []string{"--rate", "5000"}
	var out []cachedScenario
	// floor adds the floor of a load shape: no rule matches, so tollgate
	// answers without Redis.
	floor := func(group string, open bool, loads []cachedLoad) string {
		out = append(out, cachedScenario{name: loopName(open) + ", no rule matches (floor), " + group, group: group,
			precision: "floor", open: open, loads: loads})
		return group
	}
	// pair adds a scenario strict, then cached, as a share of floor.
	pair := func(group, floor string, open bool, limits []judgedLimit, ceiling float64, strict, cached []cachedLoad) {
		for _, p := range []struct {
			precision string
			loads     []cachedLoad
		}{{"strict", strict}, {"cached", cached}} {
			sc := cachedScenario{name: loopName(open) + ", " + p.precision + ", " + group, group: group, floor: floor,
				precision: p.precision, open: open, loads: p.loads, limits: limits}
			if p.precision == "cached" {
				sc.ceiling = ceiling
			}
			out = append(out, sc)
		}
	}
	keyed := func(key string) []string { return []string{"--descriptor", key + "={run}k{key}"} }
	nomatch := keyed("nomatch")

	closed := floor("Zipf(1.1) over 10 000 keys", false, one(slices.Concat(zipf10k, nomatch)...))
	pair("token bucket 1000/s, Zipf(1.1) over 10 000 keys", closed, false, bucket1000, 1000,
		one(slices.Concat(zipf10k, keyed("api_key"))...), one(slices.Concat(zipf10k, keyed("cached_key"))...))
	pair("token bucket 1000/s, uniform over 100 000 keys", closed, false, bucket1000, 1000,
		one(slices.Concat(uniform100k, keyed("api_key"))...), one(slices.Concat(uniform100k, keyed("cached_key"))...))
	pair("token bucket 10^9/s (nobody reaches it), uniform over 10 000 keys", closed, false, bucketHuge, 1e9,
		one(slices.Concat(uniform10k, keyed("huge_key"))...), one(slices.Concat(uniform10k, keyed("huge_cached_key"))...))

	opened := floor("5000/s, Zipf(1.1) over 10 000 keys", true, one(slices.Concat(zipf10k, open, nomatch)...))
	pair("5000/s, token bucket 1000/s, Zipf(1.1) over 10 000 keys", opened, true, bucket1000, 1000,
		one(slices.Concat(zipf10k, open, keyed("api_key"))...), one(slices.Concat(zipf10k, open, keyed("cached_key"))...))
	pair("5000/s, token bucket 1000/s, uniform over 100 000 keys", opened, true, bucket1000, 1000,
		one(slices.Concat(uniform100k, open, keyed("api_key"))...), one(slices.Concat(uniform100k, open, keyed("cached_key"))...))

	// The API mix: Zipf(1.1) over 100 000 keys in a closed loop split
	// over the instances, and the saturated clients, each at three times
	// its bucket's rate, split over them too.
	mix := func(key string) []cachedLoad {
		var loads []cachedLoad
		for i := range cachedInstances {
			loads = append(loads,
				cachedLoad{instance: i, args: slices.Concat(base, []string{"-c", "22", "--conns", "2",
					"--keys", "100000", "--dist", "zipf", "--zipf-s", "1.1", "--descriptor", key + "={run}k{key}"})},
				cachedLoad{instance: i, hot: true, args: slices.Concat(base, []string{"-c", "4", "--conns", "1",
					"--rate", strconv.Itoa(mixHotRate / cachedInstances), "--keys", strconv.Itoa(mixHot),
					"--descriptor", key + "={run}hot{key}"})},
			)
		}
		return loads
	}
	mixFloor := floor("API mix load (Zipf(1.1) over 100 000 keys, 5 clients at 300/s), 3 instances", false, mix("nomatch"))
	pair("API mix: 1000/min window and 20/s bucket (burst 40) per key, Zipf(1.1) over 100 000 keys, 5 clients at 3×, 3 instances",
		mixFloor, false, mixLimits, 0, mix("mix_key"), mix("mix_cached_key"))
	return out
}

// loopName names a scenario's loop.
func loopName(open bool) string {
	if open {
		return "open loop"
	}
	return "closed loop"
}

// cachedFleet is the section's Redis and tollgates, for one latency.
type cachedFleet struct {
	redisAddr string // Redis itself, for INFO
	redisPid  int
	pids      []int
	grpc      []string
	metrics   []string
	stop      func()
}

// startCachedFleet starts Redis, the latency proxy when latency is
// positive, and the tollgates, which reach Redis through the proxy.
func startCachedFleet(cfg config, dir, cdir string, latency time.Duration) (*cachedFleet, error) {
	f := &cachedFleet{}
	var stops []func()
	f.stop = func() {
		for _, s := range slices.Backward(stops) {
			s()
		}
	}
	tag := latencyTag(latency)
	redis, redisAddr, err := startRedis(dir, "redis-cached-"+tag+".log")
	if err != nil {
		return nil, err
	}
	stops = append(stops, func() { stop(redis) })
	f.redisAddr, f.redisPid = redisAddr, redis.Process.Pid
	target := redisAddr
	if latency > 0 {
		proxy, addr, err := startProxy(dir, "proxy-"+tag+".log", redisAddr, latency)
		if err != nil {
			f.stop()
			return nil, err
		}
		stops = append(stops, func() { stop(proxy) })
		target = addr
	}
	for i := range cachedInstances {
		svc, grpcAddr, httpAddr, err := startTollgate(cfg, dir, cdir, fmt.Sprintf("tollgate-cached-%s-%d.log", tag, i), target)
		if err != nil {
			f.stop()
			return nil, err
		}
		stops = append(stops, func() { stop(svc) })
		f.pids = append(f.pids, svc.Process.Pid)
		f.grpc = append(f.grpc, grpcAddr)
		f.metrics = append(f.metrics, "http://"+httpAddr+"/metrics")
	}
	return f, nil
}

// latencyTag names a latency in file and row names: "direct" for none.
func latencyTag(latency time.Duration) string {
	if latency <= 0 {
		return "direct"
	}
	return latency.String()
}

// runCached runs the section once per latency of cfg: each time, three
// rounds (cfg.runs) of every scenario in turn, so that strict and cached
// see the same machine, and reports the medians under the scenario's name
// and latency.
func runCached(cfg config, dir string) (map[string]cachedResult, error) {
	cdir := filepath.Join(dir, "cached")
	if err := os.MkdirAll(cdir, 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(cdir, "bench.yaml"), []byte(cachedRules), 0o600); err != nil {
		return nil, err
	}
	report := map[string]cachedResult{}
	var rows []cachedResult
	for _, latency := range cfg.latencies {
		results, err := runCachedAt(cfg, dir, cdir, latency)
		if err != nil {
			return nil, err
		}
		for _, r := range results {
			name := r.name
			if latency > 0 {
				name += ", Redis " + latency.String() + " away"
			}
			report[name] = r.cachedResult
			rows = append(rows, r.cachedResult)
		}
	}
	printCachedTable(os.Stderr, rows)
	return report, nil
}

// namedResult is a row and its scenario's name.
type namedResult struct {
	name string
	cachedResult
}

// runCachedAt runs the scenarios with Redis latency away (0: direct).
func runCachedAt(cfg config, dir, cdir string, latency time.Duration) ([]namedResult, error) {
	f, err := startCachedFleet(cfg, dir, cdir, latency)
	if err != nil {
		return nil, err
	}
	defer f.stop()
	scenarios := cachedScenarios(cfg)
	runs := map[string][]cachedRun{}
	for i := range cfg.runs {
		for s, sc := range scenarios {
			token := fmt.Sprintf("%sr%ds%d", strings.ReplaceAll(latencyTag(latency), ".", "_"), i, s)
			r, err := runCachedOnce(cfg, f, sc, token)
			if err != nil {
				return nil, fmt.Errorf("%s (Redis %s), run %d: %w", sc.name, latencyTag(latency), i+1, err)
			}
			logCachedRun(sc, latency, i, r)
			if r.Degraded > 0 {
				return nil, fmt.Errorf("%s (Redis %s), run %d: %d of %d answers degraded; tollgate logs in %s",
					sc.name, latencyTag(latency), i+1, r.Degraded, r.Requests, dir)
			}
			runs[sc.name] = append(runs[sc.name], r)
		}
	}
	floors := map[string]cachedRun{}
	for _, sc := range scenarios {
		if sc.precision == "floor" {
			floors[sc.group] = medianRun(runs[sc.name])
		}
	}
	var out []namedResult
	for _, sc := range scenarios {
		m := medianRun(runs[sc.name])
		r := cachedResult{measurement: m.measurement, Group: sc.group, Precision: sc.precision,
			RedisLatency: latencyTag(latency), LocalShare: m.local, ScriptCalls: m.scriptCalls,
			P90us: m.p90us, MaxUs: m.maxUs,
			HandlingP50us: m.handling[0], HandlingP90us: m.handling[1], HandlingP999: m.handling[3]}
		floor, ok := floors[sc.floor]
		if sc.precision == "floor" {
			floor, ok = m, true
		}
		if ok && floor.RPS > 0 {
			r.OfFloor = m.RPS / floor.RPS
			r.P99OfFloor = m.P99us / floor.P99us
		}
		var ps []string
		for p, n := range runs[sc.name][len(runs[sc.name])-1].paths {
			ps = append(ps, fmt.Sprintf("%s=%.0f", p, n))
		}
		slices.Sort(ps)
		r.DecisionPath = strings.Join(ps, " ")
		if sc.ceiling > 0 && len(sc.loads) == 1 {
			r.LocalCeiling = localCeiling(m.RPS, sc.loads[0].args, sc.ceiling)
		}
		if sc.limits != nil {
			var accs []accuracy
			for _, run := range runs[sc.name] {
				accs = append(accs, *run.accuracy)
			}
			w := worstAccuracy(accs)
			r.Accuracy = &w
		}
		out = append(out, namedResult{sc.name, r})
	}
	return out, nil
}

// logCachedRun prints one run's line.
func logCachedRun(sc cachedScenario, latency time.Duration, i int, r cachedRun) {
	acc := ""
	if a := r.accuracy; a != nil {
		acc = fmt.Sprintf(", overage %d, false rejections %d of %d", a.OverageHits, a.FalseRejections, a.UnderLimitHits)
		if len(a.Saturated) > 0 {
			acc += fmt.Sprintf(", saturated capacity ≥ %.2f %%", 100*a.CapacityMin)
		}
	}
	fmt.Fprintf(os.Stderr, "%s (Redis %s), run %d: %.0f decisions/s, p50 %.0f µs, p99 %.0f µs, service %.1f µs/decision, redis %.2f µs/decision, %.3f script calls/decision, handling p50 ≤ %.0f µs, p99 ≤ %.0f µs, local %.1f %%, %d degraded%s\n",
		sc.name, latencyTag(latency), i+1, r.RPS, r.P50us, r.P99us, r.ServiceUSPerOp, r.RedisUSPerOp, r.scriptCalls,
		r.handling[0], r.handling[2], 100*r.local, r.Degraded, acc)
}

// benchOutput is what the load test reads of one tollgate bench run.
type benchOutput struct {
	benchCounts
	WarmupRequests int64 `json:"warmup_requests"`
	Latency        struct {
		P50  float64 `json:"p50"`
		P90  float64 `json:"p90"`
		P99  float64 `json:"p99"`
		P999 float64 `json:"p999"`
		Max  float64 `json:"max"`
	} `json:"latency_us"`
	KeyCounts []keyCount `json:"key_counts"`
}

// runCachedOnce runs the load processes of sc at once, each pinned to
// core 0 beside Redis, and measures what the fleet and Redis spent.
func runCachedOnce(cfg config, f *cachedFleet, sc cachedScenario, token string) (cachedRun, error) {
	before, err := scrapeFleet(f)
	if err != nil {
		return cachedRun{}, err
	}
	outs := make([]benchOutput, len(sc.loads))
	errs := make([]error, len(sc.loads))
	var wg sync.WaitGroup
	for i, l := range sc.loads {
		args := slices.Concat([]string{"-c", "0", cfg.bin, "bench", "--addr", f.grpc[l.instance]}, l.args)
		for j := range args {
			args[j] = strings.ReplaceAll(args[j], "{run}", token)
		}
		wg.Go(func() {
			var stdout bytes.Buffer
			cmd := exec.Command("taskset", args...)
			cmd.Stdout, cmd.Stderr = &stdout, os.Stderr
			if err := cmd.Run(); err != nil {
				errs[i] = fmt.Errorf("tollgate bench: %w", err)
				return
			}
			if err := json.Unmarshal(stdout.Bytes(), &outs[i]); err != nil {
				errs[i] = fmt.Errorf("reading tollgate bench output: %w", err)
			}
		})
	}
	wg.Wait()
	after, err := scrapeFleet(f)
	if err != nil {
		return cachedRun{}, err
	}
	for _, err := range errs {
		if err != nil {
			return cachedRun{}, err
		}
	}

	var r cachedRun
	var served float64
	var slowest, slowestHot float64 // µs
	var counts, hot [][]keyCount
	for i, o := range outs {
		r.Requests += o.Requests
		r.RPS += o.RPS
		r.OK += o.OK
		r.OverLimit += o.OverLimit
		r.Errors += o.Errors
		r.Degraded += o.Degraded
		served += float64(o.Requests + o.WarmupRequests)
		// Several processes' percentiles do not merge: the worst stands
		// for all.
		r.P50us, r.p90us, r.P99us = max(r.P50us, o.Latency.P50), max(r.p90us, o.Latency.P90), max(r.P99us, o.Latency.P99)
		r.P999us, r.maxUs = max(r.P999us, o.Latency.P999), max(r.maxUs, o.Latency.Max)
		if sc.loads[i].hot {
			hot = append(hot, o.KeyCounts)
			slowestHot = max(slowestHot, o.Latency.Max)
		} else {
			counts = append(counts, o.KeyCounts)
			slowest = max(slowest, o.Latency.Max)
		}
	}
	if served > 0 {
		r.ServiceUSPerOp = float64((after.serviceCPU - before.serviceCPU).Microseconds()) / served
		r.RedisUSPerOp = float64((after.redisCPU - before.redisCPU).Microseconds()) / served
		r.scriptCalls = float64(after.scriptCalls-before.scriptCalls) / served
	}
	for i, q := range []float64{0.5, 0.9, 0.99, 0.999} {
		r.handling[i] = quantileBound(before.handling, after.handling, q) * 1e6
	}
	r.HandlingP99us = r.handling[2]
	r.paths = map[string]float64{}
	var total float64
	for p, n := range after.paths {
		r.paths[p] = n - before.paths[p]
		total += r.paths[p]
	}
	if total > 0 {
		r.local = (r.paths["local"] + r.paths["over_limit"]) / total
	}
	if sc.limits != nil {
		// Each load's own longest call bounds when its hits were decided.
		us := func(v float64) time.Duration { return time.Duration(v) * time.Microsecond }
		a := judge(loadgen.MergeKeyCounts(counts...), sc.limits, us(slowest))
		if len(hot) > 0 {
			hc := loadgen.MergeKeyCounts(hot...)
			a.add(judge(hc, sc.limits, us(slowestHot)))
			for _, windows := range byKey(hc) {
				a.addSaturated(capacity(windows, sc.limits))
			}
		}
		r.accuracy = &a
	}
	return r, nil
}

// fleetSample is what the section reads of the fleet and Redis around a
// run.
type fleetSample struct {
	handling             histogram
	paths                map[string]float64
	scriptCalls          int64
	serviceCPU, redisCPU time.Duration
}

// scrapeFleet reads every instance's handling histogram and decision
// paths (summed), their CPU time, Redis's CPU time and its script calls.
func scrapeFleet(f *cachedFleet) (fleetSample, error) {
	s := fleetSample{handling: histogram{}, paths: map[string]float64{}}
	for i, url := range f.metrics {
		h, err := handlingHistogram(url)
		if err != nil {
			return s, err
		}
		for b, n := range h {
			s.handling[b] += n
		}
		p, err := cachedPaths(url)
		if err != nil {
			return s, err
		}
		for k, n := range p {
			s.paths[k] += n
		}
		s.serviceCPU += cpuTime(f.pids[i])
	}
	s.redisCPU = cpuTime(f.redisPid)
	calls, err := scriptCalls(f.redisAddr)
	s.scriptCalls = calls
	return s, err
}

// scriptCalls returns how many scripts Redis has run: the calls of FCALL
// (Redis 7 and later, which the store uses there) and EVALSHA (6.2), with
// their read-only forms and EVAL, from INFO commandstats.
func scriptCalls(addr string) (int64, error) {
	c := goredis.NewClient(&goredis.Options{Addr: addr})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	info, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		return 0, fmt.Errorf("INFO commandstats: %w", err)
	}
	return parseScriptCalls(info), nil
}

// parseScriptCalls sums the calls of the script commands in an INFO
// commandstats reply.
func parseScriptCalls(info string) int64 {
	var n int64
	for line := range strings.Lines(info) {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		switch strings.TrimPrefix(name, "cmdstat_") {
		case "fcall", "fcall_ro", "evalsha", "evalsha_ro", "eval", "eval_ro":
		default:
			continue
		}
		for field := range strings.SplitSeq(rest, ",") {
			if v, ok := strings.CutPrefix(field, "calls="); ok {
				calls, _ := strconv.ParseInt(v, 10, 64)
				n += calls
			}
		}
	}
	return n
}

// medianRun returns each figure's median over runs.
func medianRun(runs []cachedRun) cachedRun {
	ms := make([]measurement, len(runs))
	for i, r := range runs {
		ms[i] = r.measurement
	}
	pick := func(get func(cachedRun) float64) float64 {
		vs := make([]float64, len(runs))
		for i, r := range runs {
			vs[i] = get(r)
		}
		slices.Sort(vs)
		return vs[len(vs)/2]
	}
	m := cachedRun{measurement: median(ms)}
	m.p90us = pick(func(r cachedRun) float64 { return r.p90us })
	m.maxUs = pick(func(r cachedRun) float64 { return r.maxUs })
	for i := range m.handling {
		m.handling[i] = pick(func(r cachedRun) float64 { return r.handling[i] })
	}
	m.local = pick(func(r cachedRun) float64 { return r.local })
	m.scriptCalls = pick(func(r cachedRun) float64 { return r.scriptCalls })
	return m
}

// printCachedTable prints the section's rows as a Markdown table, then
// the latency of each row: the client's (the worst load process's, where
// several ran) and tollgate's own handling (bucket bounds).
func printCachedTable(w *os.File, rows []cachedResult) {
	pct := func(v float64) string { return fmt.Sprintf("%.1f %%", 100*v) }
	fmt.Fprintf(w, "\n== cached section: medians of the runs; accuracy: the worst run\n\n")
	fmt.Fprintln(w, "| Redis | scenario | precision | decisions/s | of floor | local (ceiling) | script calls/decision | Redis CPU/decision | handling p99 | overage | false rejections | saturated capacity |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, r := range rows {
		local, calls, redis, over, falses, capacity := "", "", "", "", "", ""
		if r.Precision != "floor" {
			local = pct(r.LocalShare)
			if r.LocalCeiling > 0 {
				local += " (" + pct(r.LocalCeiling) + ")"
			}
			calls = fmt.Sprintf("%.3f", r.ScriptCalls)
			redis = fmt.Sprintf("%.1f µs", r.RedisUSPerOp)
		}
		if a := r.Accuracy; a != nil {
			over = strconv.FormatInt(a.OverageHits, 10)
			falses = fmt.Sprintf("%d of %d (%.3f %%)", a.FalseRejections, a.UnderLimitHits, 100*a.FalseShare)
			if len(a.Saturated) > 0 {
				capacity = "≥ " + pct(a.CapacityMin)
			}
		}
		fmt.Fprintf(w, "| %s | %s | %s | %.0f | %.2f | %s | %s | %s | ≤ %.0f µs | %s | %s | %s |\n",
			r.RedisLatency, r.Group, r.Precision, r.RPS, r.OfFloor, local, calls, redis, r.HandlingP99us, over, falses, capacity)
	}
	fmt.Fprintln(w, "\n| Redis | scenario | precision | client p50 / p90 / p99 / p99.9 / max | handling p50 / p90 / p99 / p99.9 (≤) |")
	fmt.Fprintln(w, "|---|---|---|---|---|")
	for _, r := range rows {
		fmt.Fprintf(w, "| %s | %s | %s | %.0f / %.0f / %.0f / %.0f / %.0f µs | %.0f / %.0f / %.0f / %.0f µs |\n",
			r.RedisLatency, r.Group, r.Precision, r.P50us, r.P90us, r.P99us, r.P999us, r.MaxUs,
			r.HandlingP50us, r.HandlingP90us, r.HandlingP99us, r.HandlingP999)
	}
	fmt.Fprintln(w)
}

// localCeiling returns the largest share of decisions that a lease could
// decide without a round trip when requests arrive at rps with the key
// distribution of args, against a token bucket of limit a second (leases
// living 500 ms, the default). Two kinds of hit need the shared counter
// whatever the leasing policy: the first hit of a key after its lease's
// lifetime (nothing was charged for it beforehand), and the admissions of
// a key whose demand exceeds its limit (its bucket is empty, so each
// token is charged when it is spent; reserving tokens ahead there is what
// made other instances' hits falsely rejected). It replays 20 s of the
// same generator that tollgate bench uses, evenly spaced.
func localCeiling(rps float64, args []string, limit float64) float64 {
	const (
		seconds  = 20
		lifetime = 0.5
	)
	keys, zipf := uint64(0), false
	for i := 0; i+1 < len(args); i++ {
		switch args[i] {
		case "--keys":
			keys, _ = strconv.ParseUint(args[i+1], 10, 64)
		case "--dist":
			zipf = args[i+1] == "zipf"
		}
	}
	n := int(rps * seconds)
	if keys < 2 || n == 0 {
		return 0
	}
	rng := rand.New(rand.NewPCG(1, 2))
	next := func() uint64 { return rng.Uint64N(keys) }
	if zipf {
		next = rand.NewZipf(rng, 1.1, 1, keys-1).Uint64
	}
	last := make(map[uint64]float64)
	hits := make(map[uint64]float64)
	cold := 0
	for i := range n {
		t, k := float64(i)/rps, next()
		if at, ok := last[k]; !ok || t-at > lifetime {
			cold++
		}
		last[k] = t
		hits[k]++
	}
	saturated := 0.0
	for _, h := range hits {
		if h > limit*seconds {
			saturated += limit * seconds
		}
	}
	return 1 - (float64(cold)+saturated)/float64(n)
}

// cachedPaths scrapes the cached store's decisions by path, summed over
// every other attribute.
func cachedPaths(url string) (map[string]float64, error) {
	resp, err := http.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "tollgate_cached_decisions_total{") {
			continue
		}
		_, rest, _ := strings.Cut(line, `path="`)
		path, _, _ := strings.Cut(rest, `"`)
		fields := strings.Fields(line)
		n, err := strconv.ParseFloat(fields[len(fields)-1], 64)
		if err != nil {
			continue
		}
		out[path] += n
	}
	return out, sc.Err()
}
