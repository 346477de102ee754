package main

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// sectionCached measures leased budgets (precision: cached) beside strict
// decisions and the floor, on one tollgate over one Redis, pinned as the
// Redis section pins them.
const sectionCached = "cached"

// cachedRules adds to rules a token bucket decided from leases.
const cachedRules = rules + `  - key: cached_key
    rate_limit: {unit: second, requests_per_unit: 1000, algorithm: token_bucket, precision: cached}
`

// cachedResult is the median of a scenario's runs, with the share of its
// decisions made without a Redis round trip and its throughput as a share
// of the same run's floor.
type cachedResult struct {
	measurement
	LocalShare float64 `json:"local_share"`
	OfFloor    float64 `json:"of_floor"`
	// LocalCeiling is the most LocalShare could be at the scenario's rate
	// (see localCeiling); 0 for scenarios without leases.
	LocalCeiling float64 `json:"local_ceiling,omitempty"`
	P99OfFloor   float64 `json:"p99_of_floor"`
	DecisionPath string  `json:"decision_paths"`
}

// runCached runs, three times in turn, the floor (no rule matches), the
// strict token bucket and the leased one under Zipf(1.1) over 10 000 keys
// and uniformly over 100 000, in a closed loop, and the floor and the
// leased bucket in an open loop at 5 000 requests a second.
func runCached(cfg config, dir string) (map[string]cachedResult, error) {
	cdir := filepath.Join(dir, "cached")
	if err := os.MkdirAll(cdir, 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(cdir, "bench.yaml"), []byte(cachedRules), 0o600); err != nil {
		return nil, err
	}
	redis, redisAddr, err := startRedis(dir, "redis-cached.log")
	if err != nil {
		return nil, err
	}
	defer stop(redis)
	svc, grpcAddr, httpAddr, err := startTollgate(cfg, dir, cdir, "tollgate-cached.log", redisAddr)
	if err != nil {
		return nil, err
	}
	defer stop(svc)

	base := []string{"--addr", grpcAddr, "--domain", "bench", "--duration", cfg.duration.String(), "--warmup", "2s",
		"-c", "64", "--conns", "4"}
	zipf := []string{"--keys", "10000", "--dist", "zipf", "--zipf-s", "1.1"}
	uniform := []string{"--keys", "100000"}
	open := []string{"--rate", "5000"}
	join := func(parts ...[]string) []string { return slices.Concat(parts...) }
	const (
		floorClosed  = "closed loop, no rule matches (floor)"
		strictZipf   = "closed loop, strict token bucket, Zipf(1.1) over 10 000 keys"
		cachedZipf   = "closed loop, cached token bucket, Zipf(1.1) over 10 000 keys"
		cachedUnif   = "closed loop, cached token bucket, uniform over 100 000 keys"
		floorOpen    = "open loop 5000/s, no rule matches (floor)"
		cachedOpenZ  = "open loop 5000/s, cached token bucket, Zipf(1.1) over 10 000 keys"
		cachedOpenUn = "open loop 5000/s, cached token bucket, uniform over 100 000 keys"
	)
	scenarios := []scenario{
		{floorClosed, join(base, zipf, []string{"--descriptor", "nomatch=k{key}"})},
		{strictZipf, join(base, zipf, []string{"--descriptor", "api_key=k{key}"})},
		{cachedZipf, join(base, zipf, []string{"--descriptor", "cached_key=k{key}"})},
		{cachedUnif, join(base, uniform, []string{"--descriptor", "cached_key=k{key}"})},
		{floorOpen, join(base, zipf, open, []string{"--descriptor", "nomatch=k{key}"})},
		{cachedOpenZ, join(base, zipf, open, []string{"--descriptor", "cached_key=k{key}"})},
		{cachedOpenUn, join(base, uniform, open, []string{"--descriptor", "cached_key=k{key}"})},
	}
	metricsURL := "http://" + httpAddr + "/metrics"
	runs := map[string][]measurement{}
	local := map[string][]float64{}
	paths := map[string]map[string]float64{}
	// Runs go round the scenarios in turn, so that each sees the machine
	// the others saw.
	for i := range cfg.runs {
		for _, sc := range scenarios {
			before, err := cachedPaths(metricsURL)
			if err != nil {
				return nil, err
			}
			m, err := measure(cfg.bin, sc, svc.Process.Pid, redis.Process.Pid, metricsURL)
			if err != nil {
				return nil, fmt.Errorf("%s, run %d: %w", sc.name, i+1, err)
			}
			after, err := cachedPaths(metricsURL)
			if err != nil {
				return nil, err
			}
			delta := map[string]float64{}
			var total float64
			for p, n := range after {
				delta[p] = n - before[p]
				total += delta[p]
			}
			share := 0.0
			if total > 0 {
				share = (delta["local"] + delta["over_limit"]) / total
			}
			fmt.Fprintf(os.Stderr, "%s, run %d: %.0f decisions/s, p99 %.0f µs, service %.1f µs/decision, redis %.2f µs/decision, handling p99 ≤ %.0f µs, local %.1f %%, %d degraded\n",
				sc.name, i+1, m.RPS, m.P99us, m.ServiceUSPerOp, m.RedisUSPerOp, m.HandlingP99us, 100*share, m.Degraded)
			if m.Degraded > 0 {
				return nil, fmt.Errorf("%s, run %d: %d of %d answers degraded; tollgate log:\n%s",
					sc.name, i+1, m.Degraded, m.Requests, tail(filepath.Join(dir, "tollgate-cached.log")))
			}
			runs[sc.name] = append(runs[sc.name], m)
			local[sc.name] = append(local[sc.name], share)
			paths[sc.name] = delta
		}
	}
	report := map[string]cachedResult{}
	for _, sc := range scenarios {
		m := median(runs[sc.name])
		shares := slices.Clone(local[sc.name])
		slices.Sort(shares)
		r := cachedResult{measurement: m, LocalShare: shares[len(shares)/2]}
		floor := median(runs[floorClosed])
		if strings.HasPrefix(sc.name, "open loop") {
			floor = median(runs[floorOpen])
		}
		r.OfFloor = m.RPS / floor.RPS
		r.P99OfFloor = m.P99us / floor.P99us
		var ps []string
		for p, n := range paths[sc.name] {
			ps = append(ps, fmt.Sprintf("%s=%.0f", p, n))
		}
		slices.Sort(ps)
		r.DecisionPath = strings.Join(ps, " ")
		if strings.Contains(sc.name, "cached") {
			r.LocalCeiling = localCeiling(m.RPS, sc.args)
		}
		report[sc.name] = r
	}
	return report, nil
}

// localCeiling returns the largest share of decisions that a lease could
// decide without a round trip when requests arrive at rps with the key
// distribution of args, against cachedRules' bucket (1000 a second, leases
// living 500 ms, the default). Two kinds of hit need the shared counter
// whatever the leasing policy: the first hit of a key after its lease's
// lifetime (nothing was charged for it beforehand), and the admissions of a
// key whose demand exceeds its limit (its bucket is empty, so each token
// is charged when it is spent; reserving tokens ahead there is what made
// other instances' hits falsely rejected). It replays 20 s of the same
// generator that tollgate bench uses, evenly spaced.
func localCeiling(rps float64, args []string) float64 {
	const (
		seconds  = 20
		lifetime = 0.5
		limit    = 1000
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
