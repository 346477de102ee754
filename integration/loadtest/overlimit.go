package main

import (
	"fmt"
	"os"
	"slices"
	"strconv"
)

// sectionOverLimit measures traffic that is entirely over its limit, with
// and without the over-limit cache (--over-limit-cache-bytes).
const sectionOverLimit = "overlimit"

// overLimitCacheBytes is the cache given to the cached tollgate.
const overLimitCacheBytes = 64 << 20

// overLimitResult is the median of one tollgate's runs, with its resident
// memory after the last run.
type overLimitResult struct {
	measurement
	CacheBytes int64   `json:"over_limit_cache_bytes"`
	RSS        float64 `json:"rss_mib"`
}

// runOverLimit starts Redis and two tollgates, one without and one with
// the over-limit cache, and measures each on a descriptor whose limit of
// one an hour every key exceeds after the warm-up. Runs alternate between
// the two, so that both see the same machine.
func runOverLimit(cfg config, dir string) (map[string]overLimitResult, error) {
	redis, redisAddr, err := startRedis(dir, "redis-overlimit.log")
	if err != nil {
		return nil, err
	}
	defer stop(redis)
	type instance struct {
		name       string
		cacheBytes int64
		grpcAddr   string
		httpAddr   string
		pid        int
	}
	instances := []*instance{
		{name: "over limit, no cache"},
		{name: "over limit, over-limit cache", cacheBytes: overLimitCacheBytes},
	}
	for i, in := range instances {
		svc, grpcAddr, httpAddr, err := startTollgate(cfg, dir, dir, fmt.Sprintf("tollgate-overlimit-%d.log", i), redisAddr,
			"--redis-key-prefix", fmt.Sprintf("tg%d", i), "--over-limit-cache-bytes", strconv.FormatInt(in.cacheBytes, 10))
		if err != nil {
			return nil, err
		}
		defer stop(svc)
		in.grpcAddr, in.httpAddr, in.pid = grpcAddr, httpAddr, svc.Process.Pid
	}
	runs := make([][]measurement, len(instances))
	for run := range cfg.runs {
		for i, in := range instances {
			sc := scenario{name: in.name, args: []string{"--addr", in.grpcAddr, "--domain", "bench", "--keys", "1000",
				"--duration", cfg.duration.String(), "--warmup", "2s",
				"--descriptor", "over=k{key}", "-c", "64", "--conns", "4"}}
			m, err := measure(cfg.bin, sc, in.pid, redis.Process.Pid, "http://"+in.httpAddr+"/metrics")
			if err != nil {
				return nil, fmt.Errorf("%s, run %d: %w", in.name, run+1, err)
			}
			fmt.Fprintf(os.Stderr, "%s, run %d: %.0f decisions/s (%d over limit, %d ok), service %.1f µs/decision, redis %.1f µs/decision, %d degraded\n",
				in.name, run+1, m.RPS, m.OverLimit, m.OK, m.ServiceUSPerOp, m.RedisUSPerOp, m.Degraded)
			if m.Degraded > 0 {
				return nil, fmt.Errorf("%s, run %d: %d of %d answers degraded", in.name, run+1, m.Degraded, m.Requests)
			}
			runs[i] = append(runs[i], m)
		}
	}
	report := map[string]overLimitResult{}
	for i, in := range instances {
		kb, err := vmRSS(in.pid)
		if err != nil {
			return nil, err
		}
		report[in.name] = overLimitResult{measurement: median(slices.Clone(runs[i])), CacheBytes: in.cacheBytes, RSS: mib(kb)}
	}
	return report, nil
}
