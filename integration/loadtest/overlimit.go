package main

import (
	"fmt"
	"os"
	"path/filepath"
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
	ports, err := freePorts(5)
	if err != nil {
		return nil, err
	}
	redisAddr := fmt.Sprintf("127.0.0.1:%d", ports[0])
	redis, err := start(dir, "redis-overlimit.log", "taskset", "-c", "0", "redis-server", "--bind", "127.0.0.1",
		"--port", strconv.Itoa(ports[0]), "--save", "", "--appendonly", "no")
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
		{name: "over limit, no cache", grpcAddr: fmt.Sprintf("127.0.0.1:%d", ports[1]), httpAddr: fmt.Sprintf("127.0.0.1:%d", ports[2])},
		{name: "over limit, over-limit cache", cacheBytes: overLimitCacheBytes, grpcAddr: fmt.Sprintf("127.0.0.1:%d", ports[3]), httpAddr: fmt.Sprintf("127.0.0.1:%d", ports[4])},
	}
	for i, in := range instances {
		log := fmt.Sprintf("tollgate-overlimit-%d.log", i)
		svc, err := start(dir, log, "taskset", "-c", "1", cfg.bin, "serve", "--config-dir", dir,
			"--store", "redis", "--redis-addrs", redisAddr, "--store-timeout", "1s",
			"--redis-key-prefix", fmt.Sprintf("tg%d", i),
			"--over-limit-cache-bytes", strconv.FormatInt(in.cacheBytes, 10),
			"--grpc-addr", in.grpcAddr, "--http-addr", in.httpAddr, "--debug-addr", "", "--log-level", "warn")
		if err != nil {
			return nil, err
		}
		defer stop(svc)
		if err := waitReady("http://" + in.httpAddr + "/readyz"); err != nil {
			return nil, fmt.Errorf("%w; tollgate log:\n%s", err, tail(filepath.Join(dir, log)))
		}
		in.pid = svc.Process.Pid
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
