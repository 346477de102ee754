// Command loadtest measures tollgate on Redis the way the Redis-store issue
// asks: tollgate pinned to one core, redis-server and the load generator to
// the other; three runs of each scenario, medians reported, with the CPU
// time per decision of tollgate and of Redis read from /proc.
//
// Run it with `make bench` (or `go run ./integration/loadtest`); it builds
// nothing itself and expects bin/tollgate.
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
`

// clockTick is the unit of utime and stime in /proc/PID/stat (USER_HZ).
const clockTick = 10 * time.Millisecond

func main() {
	bin := flag.String("bin", "bin/tollgate", "the tollgate binary")
	duration := flag.Duration("duration", 10*time.Second, "length of each measured run")
	runs := flag.Int("runs", 3, "runs per scenario; the median is reported")
	flag.Parse()
	if err := run(*bin, *duration, *runs); err != nil {
		fmt.Fprintln(os.Stderr, "loadtest:", err)
		os.Exit(1)
	}
}

// scenario is one load shape.
type scenario struct {
	name string
	args []string
}

// measurement is one run of a scenario.
type measurement struct {
	Requests       int64   `json:"requests"`
	RPS            float64 `json:"rps"`
	OK             int64   `json:"ok"`
	OverLimit      int64   `json:"over_limit"`
	Errors         int64   `json:"errors"`
	P50us          float64 `json:"p50_us"`
	P99us          float64 `json:"p99_us"`
	P999us         float64 `json:"p999_us"`
	ServiceUSPerOp float64 `json:"service_cpu_us_per_decision"`
	RedisUSPerOp   float64 `json:"redis_cpu_us_per_decision"`
	HandlingP99us  float64 `json:"service_handling_p99_us"`
}

func run(bin string, duration time.Duration, runs int) error {
	dir, err := os.MkdirTemp("", "tollgate-loadtest")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if err := os.WriteFile(filepath.Join(dir, "bench.yaml"), []byte(rules), 0o600); err != nil {
		return err
	}
	ports, err := freePorts(3)
	if err != nil {
		return err
	}
	redisAddr := fmt.Sprintf("127.0.0.1:%d", ports[0])
	grpcAddr := fmt.Sprintf("127.0.0.1:%d", ports[1])
	httpAddr := fmt.Sprintf("127.0.0.1:%d", ports[2])

	redis, err := start(dir, "redis.log", "taskset", "-c", "0", "redis-server", "--bind", "127.0.0.1",
		"--port", strconv.Itoa(ports[0]), "--save", "", "--appendonly", "no")
	if err != nil {
		return err
	}
	defer stop(redis)
	svc, err := start(dir, "tollgate.log", "taskset", "-c", "1", bin, "serve", "--config-dir", dir,
		"--store", "redis", "--redis-addrs", redisAddr, "--grpc-addr", grpcAddr, "--http-addr", httpAddr,
		"--debug-addr", "", "--log-level", "warn")
	if err != nil {
		return err
	}
	defer stop(svc)
	if err := waitReady("http://" + httpAddr + "/readyz"); err != nil {
		return fmt.Errorf("%w; tollgate log:\n%s", err, tail(filepath.Join(dir, "tollgate.log")))
	}

	base := []string{"--addr", grpcAddr, "--domain", "bench", "--keys", "10000",
		"--duration", duration.String(), "--warmup", "2s"}
	scenarios := []scenario{
		{"closed loop c=64, token bucket, 10 000 keys", append(slices.Clone(base), "--descriptor", "api_key=k{key}", "-c", "64", "--conns", "4")},
		{"open loop 5000/s, token bucket", append(slices.Clone(base), "--descriptor", "api_key=k{key}", "--rate", "5000", "-c", "64", "--conns", "4")},
		{"open loop 5000/s, no rule matches (floor)", append(slices.Clone(base), "--descriptor", "nomatch=k{key}", "--rate", "5000", "-c", "64", "--conns", "4")},
	}
	report := map[string]measurement{}
	for _, sc := range scenarios {
		var ms []measurement
		for i := range runs {
			m, err := measure(bin, sc, svc.Process.Pid, redis.Process.Pid, "http://"+httpAddr+"/metrics")
			if err != nil {
				return fmt.Errorf("%s, run %d: %w", sc.name, i+1, err)
			}
			fmt.Fprintf(os.Stderr, "%s, run %d: %.0f decisions/s, p99 %.0f µs, service %.1f µs/decision, redis %.1f µs/decision, handling p99 ≤ %.0f µs\n",
				sc.name, i+1, m.RPS, m.P99us, m.ServiceUSPerOp, m.RedisUSPerOp, m.HandlingP99us)
			ms = append(ms, m)
		}
		report[sc.name] = median(ms)
	}
	out, _ := json.MarshalIndent(report, "", "  ")
	fmt.Println(string(out))
	return nil
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
		Requests       int64   `json:"requests"`
		WarmupRequests int64   `json:"warmup_requests"`
		RPS            float64 `json:"rps"`
		OK             int64   `json:"ok"`
		OverLimit      int64   `json:"over_limit"`
		Errors         int64   `json:"errors"`
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
		Requests: res.Requests, RPS: res.RPS, OK: res.OK, OverLimit: res.OverLimit, Errors: res.Errors,
		P50us: res.Latency.P50, P99us: res.Latency.P99, P999us: res.Latency.P999,
		ServiceUSPerOp: float64(svcCPU.Microseconds()) / served,
		RedisUSPerOp:   float64(redisCPU.Microseconds()) / served,
		HandlingP99us:  quantileBound(before, after, 0.99) * 1e6,
	}, nil
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
		Requests:       int64(pick(func(m measurement) float64 { return float64(m.Requests) })),
		RPS:            pick(func(m measurement) float64 { return m.RPS }),
		OK:             int64(pick(func(m measurement) float64 { return float64(m.OK) })),
		OverLimit:      int64(pick(func(m measurement) float64 { return float64(m.OverLimit) })),
		Errors:         int64(pick(func(m measurement) float64 { return float64(m.Errors) })),
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
