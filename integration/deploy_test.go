package integration

// Checks of the deployment files at the top of the repository: the
// Dockerfile, docker-compose.yaml and the Prometheus and Grafana files of
// its observability profile. There is no Docker engine here: each file is
// decoded by the library its tool uses (compose-go for the compose file) or
// by a small parser, and checked against the code and against each other.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/types"
	"github.com/spf13/pflag"
	"gopkg.in/yaml.v3"

	"github.com/tollgatehq/tollgate/pkg/app"
	"github.com/tollgatehq/tollgate/pkg/cli"
)

// The deployment files, relative to this package.
const (
	repoRoot         = ".."
	composeFile      = "../docker-compose.yaml"
	dockerfile       = "../Dockerfile"
	dockerignore     = "../.dockerignore"
	envoyBootstrap   = "../envoy/envoy.yaml"
	prometheusConfig = "../envoy/observability/prometheus.yml"
	grafanaDatasrc   = "../envoy/observability/grafana/provisioning/datasources/prometheus.yaml"
	grafanaProvider  = "../envoy/observability/grafana/provisioning/dashboards/tollgate.yaml"
	grafanaDashboard = "../envoy/observability/grafana/dashboards/tollgate.json"
)

// The compose services and the profile of the optional ones.
const (
	svcEnvoy, svcTollgate, svcRedis, svcPrometheus, svcGrafana = "envoy", "tollgate", "redis", "prometheus", "grafana"
	observabilityProfile                                       = "observability"
	redisPort                                                  = 6379
	envoyListenerPort                                          = 10000
)

// loadCompose loads docker-compose.yaml as `docker compose` would, with
// the given profiles enabled and no environment variables set.
func loadCompose(t *testing.T, profiles ...string) *types.Project {
	t.Helper()
	abs, err := filepath.Abs(composeFile)
	if err != nil {
		t.Fatal(err)
	}
	project, err := loader.LoadWithContext(context.Background(), types.ConfigDetails{
		WorkingDir:  filepath.Dir(abs),
		ConfigFiles: []types.ConfigFile{{Filename: abs}},
		Environment: types.Mapping{},
	}, func(o *loader.Options) {
		o.Profiles = profiles
		o.ResolvePaths = true
	})
	if err != nil {
		t.Fatalf("loading %s: %v", composeFile, err)
	}
	return project
}

func composeService(t *testing.T, p *types.Project, name string) types.ServiceConfig {
	t.Helper()
	s, err := p.GetService(name)
	if err != nil {
		t.Fatalf("%s: %v", composeFile, err)
	}
	return s
}

// defaultPorts returns the ports of serve's default gRPC and HTTP
// addresses.
func defaultPorts(t *testing.T) (grpcPort, httpPort uint32) {
	t.Helper()
	s, err := app.DefaultSettings()
	if err != nil {
		t.Fatal(err)
	}
	return portOf(t, s.Listen.GRPC), portOf(t, s.Listen.HTTP)
}

func portOf(t *testing.T, addr string) uint32 {
	t.Helper()
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("address %q: %v", addr, err)
	}
	n, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		t.Fatalf("address %q: %v", addr, err)
	}
	return uint32(n)
}

func TestComposeServicesAndProfile(t *testing.T) {
	base := loadCompose(t)
	if got, want := slices.Sorted(maps.Keys(base.Services)), []string{svcEnvoy, svcRedis, svcTollgate}; !slices.Equal(got, want) {
		t.Errorf("services without a profile: %v, want %v", got, want)
	}
	full := loadCompose(t, observabilityProfile)
	if got, want := slices.Sorted(maps.Keys(full.Services)), []string{svcEnvoy, svcGrafana, svcPrometheus, svcRedis, svcTollgate}; !slices.Equal(got, want) {
		t.Errorf("services with profile %s: %v, want %v", observabilityProfile, got, want)
	}
	for name, s := range full.Services {
		want := []string(nil)
		if name == svcPrometheus || name == svcGrafana {
			want = []string{observabilityProfile}
		}
		if !slices.Equal(s.Profiles, want) {
			t.Errorf("%s: profiles %v, want %v", name, s.Profiles, want)
		}
	}
}

// pinnedImage matches an image with an exact version tag: no "latest", no
// bare major or minor version.
var pinnedImage = regexp.MustCompile(`^[a-z0-9./-]+:v?\d+\.\d+\.\d+(-[a-z0-9.]+)?$`)

func TestComposeImagesArePinned(t *testing.T) {
	p := loadCompose(t, observabilityProfile)
	for name, s := range p.Services {
		if name == svcTollgate {
			if s.Build == nil || s.Build.Dockerfile != "Dockerfile" || !sameDir(t, s.Build.Context, repoRoot) {
				t.Errorf("tollgate: build %+v, want the repository's Dockerfile", s.Build)
			}
			continue
		}
		if !pinnedImage.MatchString(s.Image) {
			t.Errorf("%s: image %q is not pinned to an exact version", name, s.Image)
		}
	}
}

func sameDir(t *testing.T, a, b string) bool {
	t.Helper()
	absA, errA := filepath.Abs(a)
	absB, errB := filepath.Abs(b)
	if err := errors.Join(errA, errB); err != nil {
		t.Fatal(err)
	}
	return absA == absB
}

func TestComposeTollgateService(t *testing.T) {
	p := loadCompose(t)
	tg := composeService(t, p, svcTollgate)
	grpcPort, httpPort := defaultPorts(t)

	// It counts in the compose file's Redis, on Redis's port.
	if got := flagValue(tg.Command, "--store"); got != "redis" {
		t.Errorf("tollgate --store %q, want redis", got)
	}
	if got, want := flagValue(tg.Command, "--redis-addrs"), fmt.Sprintf("%s:%d", svcRedis, redisPort); got != want {
		t.Errorf("tollgate --redis-addrs %q, want %q", got, want)
	}
	// The command is one serve accepts: run it with a config directory
	// that does not exist, and it must fail on that and nothing else.
	args := append(slices.Clone([]string(tg.Command)), "--config-dir", t.TempDir()+"/missing",
		"--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--debug-addr", "")
	var stderr bytes.Buffer
	if code := cli.MainEnv(context.Background(), args, &bytes.Buffer{}, &stderr, os.Getenv); code != 1 || !strings.Contains(stderr.String(), "missing") {
		t.Errorf("tollgate %s: exit %d, stderr %q; want exit 1 on the missing directory only", strings.Join(args, " "), code, stderr.String())
	}

	// The config directory is config-examples/, read-only, mounted where
	// the image looks for it.
	image := parseDockerfile(t)
	configDir := image.configDir(t)
	found := false
	for _, v := range tg.Volumes {
		if v.Target == configDir {
			found = true
			if !sameDir(t, v.Source, filepath.Join(repoRoot, "config-examples")) || v.Type != types.VolumeTypeBind || !v.ReadOnly {
				t.Errorf("tollgate mounts %s from %s (type %s, read-only %v), want config-examples/, a read-only bind", configDir, v.Source, v.Type, v.ReadOnly)
			}
		}
	}
	if !found {
		t.Errorf("tollgate mounts nothing at the image's config directory %s", configDir)
	}

	// Its gRPC and HTTP ports are published on loopback only.
	published := map[uint32]types.ServicePortConfig{}
	for _, port := range tg.Ports {
		published[port.Target] = port
	}
	for _, want := range []uint32{grpcPort, httpPort} {
		port, ok := published[want]
		if !ok || port.HostIP != "127.0.0.1" || port.Published != strconv.Itoa(int(want)) {
			t.Errorf("tollgate port %d: %+v, want published as 127.0.0.1:%d", want, port, want)
		}
	}
	// Every port it publishes, the debug listener's included, is on the
	// host's loopback.
	for _, port := range tg.Ports {
		if port.HostIP != "127.0.0.1" {
			t.Errorf("tollgate port %d is published on %q, want 127.0.0.1 only", port.Target, port.HostIP)
		}
	}

	// Its health check is tollgate's own, on its gRPC port.
	hc := tg.HealthCheck
	if hc == nil || len(hc.Test) < 3 || hc.Test[0] != "CMD" || hc.Test[1] != image.binary || hc.Test[2] != "health" {
		t.Fatalf("tollgate health check %v, want [CMD %s health ...]", hc, image.binary)
	}
	if got, want := flagValue(hc.Test[3:], "--addr"), fmt.Sprintf("127.0.0.1:%d", grpcPort); got != want {
		t.Errorf("tollgate health check --addr %q, want %q", got, want)
	}
}

// flagValue returns the value after flag in args, or "".
func flagValue(args []string, flag string) string {
	for i, a := range args {
		if a == flag && i+1 < len(args) {
			return args[i+1]
		}
		if v, ok := strings.CutPrefix(a, flag+"="); ok {
			return v
		}
	}
	return ""
}

func TestComposeHealthChecksAndDependencies(t *testing.T) {
	p := loadCompose(t, observabilityProfile)
	wantDeps := map[string][]string{
		svcEnvoy:      {svcTollgate},
		svcTollgate:   {svcRedis},
		svcRedis:      nil,
		svcPrometheus: {svcEnvoy, svcTollgate},
		svcGrafana:    {svcPrometheus},
	}
	for name, s := range p.Services {
		hc := s.HealthCheck
		if hc == nil || hc.Disable || len(hc.Test) < 2 || (hc.Test[0] != "CMD" && hc.Test[0] != "CMD-SHELL") {
			t.Errorf("%s: health check %+v, want a CMD or CMD-SHELL test", name, hc)
		}
		if hc != nil && (hc.Interval == nil || hc.Timeout == nil || hc.Retries == nil) {
			t.Errorf("%s: health check without interval, timeout or retries", name)
		}
		if got := slices.Sorted(maps.Keys(s.DependsOn)); !slices.Equal(got, wantDeps[name]) {
			t.Errorf("%s: depends on %v, want %v", name, got, wantDeps[name])
		}
		for dep, d := range s.DependsOn {
			if d.Condition != types.ServiceConditionHealthy {
				t.Errorf("%s depends on %s with condition %q, want %s", name, dep, d.Condition, types.ServiceConditionHealthy)
			}
		}
	}
}

func TestComposeMountsExist(t *testing.T) {
	p := loadCompose(t, observabilityProfile)
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	for name, s := range p.Services {
		for _, v := range s.Volumes {
			t.Run(name+":"+v.Target, func(t *testing.T) {
				if v.Type != types.VolumeTypeBind || !v.ReadOnly {
					t.Errorf("type %s, read-only %v; want a read-only bind", v.Type, v.ReadOnly)
				}
				rel, err := filepath.Rel(root, v.Source)
				if err != nil || strings.HasPrefix(rel, "..") {
					t.Fatalf("source %s is outside the repository", v.Source)
				}
				if _, err := os.Stat(v.Source); err != nil {
					if errors.Is(err, fs.ErrNotExist) && filepath.ToSlash(rel) == "envoy/envoy.yaml" {
						t.Skipf("%s is not in this tree yet (it comes with the envoy/ work); the mount cannot be checked", rel)
					}
					t.Fatalf("source: %v", err)
				}
			})
		}
	}
}

// TestComposeEnvoyReachesTollgate checks that Envoy's rate-limit cluster
// names the compose service of tollgate and its gRPC port, and that the
// published port is the listener's.
func TestComposeEnvoyReachesTollgate(t *testing.T) {
	data, err := os.ReadFile(envoyBootstrap)
	if errors.Is(err, fs.ErrNotExist) {
		t.Skipf("%s is not in this tree yet (it comes with the envoy/ work); the cluster address cannot be checked", envoyBootstrap)
	}
	if err != nil {
		t.Fatal(err)
	}
	var b envoyBootstrapDoc
	if err := yaml.Unmarshal(data, &b); err != nil {
		t.Fatalf("%s: %v", envoyBootstrap, err)
	}
	grpcPort, _ := defaultPorts(t)
	cluster := b.rateLimitCluster()
	if cluster == "" {
		t.Fatalf("%s: no envoy.filters.http.ratelimit filter names a cluster", envoyBootstrap)
	}
	var addrs []string
	for _, c := range b.StaticResources.Clusters {
		if c.Name != cluster {
			continue
		}
		for _, e := range c.LoadAssignment.Endpoints {
			for _, lb := range e.LBEndpoints {
				sa := lb.Endpoint.Address.SocketAddress
				addrs = append(addrs, fmt.Sprintf("%s:%d", sa.Address, sa.PortValue))
			}
		}
	}
	if want := fmt.Sprintf("%s:%d", svcTollgate, grpcPort); !slices.Equal(addrs, []string{want}) {
		t.Errorf("%s: cluster %q reaches %v, want [%s] (the compose service and tollgate's gRPC port)", envoyBootstrap, cluster, addrs, want)
	}

	envoy := composeService(t, loadCompose(t), svcEnvoy)
	listeners := map[uint32]bool{}
	for _, l := range b.StaticResources.Listeners {
		listeners[l.Address.SocketAddress.PortValue] = true
	}
	for _, port := range envoy.Ports {
		if !listeners[port.Target] {
			t.Errorf("envoy publishes container port %d, where envoy.yaml has no listener", port.Target)
		}
	}
	if len(envoy.Ports) != 1 || envoy.Ports[0].Target != envoyListenerPort {
		t.Errorf("envoy publishes %+v, want only the listener %d", envoy.Ports, envoyListenerPort)
	}
	if got := b.Admin.Address.SocketAddress.PortValue; got != envoyAdminPort(t) {
		t.Errorf("envoy admin port %d, Prometheus scrapes %d", got, envoyAdminPort(t))
	}
}

// envoyBootstrapDoc is the part of an Envoy bootstrap these tests read;
// envoy/envoy_test.go decodes the whole of it into the bootstrap proto.
type envoyBootstrapDoc struct {
	Admin struct {
		Address envoyAddress `yaml:"address"`
	} `yaml:"admin"`
	StaticResources struct {
		Listeners []struct {
			Address      envoyAddress `yaml:"address"`
			FilterChains []struct {
				Filters []struct {
					TypedConfig struct {
						HTTPFilters []struct {
							Name        string `yaml:"name"`
							TypedConfig struct {
								RateLimitService struct {
									GRPCService struct {
										EnvoyGRPC struct {
											ClusterName string `yaml:"cluster_name"`
										} `yaml:"envoy_grpc"`
									} `yaml:"grpc_service"`
								} `yaml:"rate_limit_service"`
							} `yaml:"typed_config"`
						} `yaml:"http_filters"`
					} `yaml:"typed_config"`
				} `yaml:"filters"`
			} `yaml:"filter_chains"`
		} `yaml:"listeners"`
		Clusters []struct {
			Name           string `yaml:"name"`
			LoadAssignment struct {
				Endpoints []struct {
					LBEndpoints []struct {
						Endpoint struct {
							Address envoyAddress `yaml:"address"`
						} `yaml:"endpoint"`
					} `yaml:"lb_endpoints"`
				} `yaml:"endpoints"`
			} `yaml:"load_assignment"`
		} `yaml:"clusters"`
	} `yaml:"static_resources"`
}

type envoyAddress struct {
	SocketAddress struct {
		Address   string `yaml:"address"`
		PortValue uint32 `yaml:"port_value"`
	} `yaml:"socket_address"`
}

// rateLimitCluster returns the cluster the HTTP rate-limit filter calls.
func (b *envoyBootstrapDoc) rateLimitCluster() string {
	for _, l := range b.StaticResources.Listeners {
		for _, fc := range l.FilterChains {
			for _, f := range fc.Filters {
				for _, hf := range f.TypedConfig.HTTPFilters {
					if hf.Name == "envoy.filters.http.ratelimit" {
						return hf.TypedConfig.RateLimitService.GRPCService.EnvoyGRPC.ClusterName
					}
				}
			}
		}
	}
	return ""
}

// prometheusDoc is the part of the Prometheus configuration the demo uses,
// decoded strictly so that a misspelt field fails.
type prometheusDoc struct {
	Global struct {
		ScrapeInterval     string `yaml:"scrape_interval"`
		EvaluationInterval string `yaml:"evaluation_interval"`
	} `yaml:"global"`
	RuleFiles     []string `yaml:"rule_files"`
	ScrapeConfigs []struct {
		JobName       string `yaml:"job_name"`
		MetricsPath   string `yaml:"metrics_path"`
		StaticConfigs []struct {
			Targets []string `yaml:"targets"`
		} `yaml:"static_configs"`
	} `yaml:"scrape_configs"`
}

func decodeStrict(t *testing.T, path string, v any) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dec := yaml.NewDecoder(f)
	dec.KnownFields(true)
	if err := dec.Decode(v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// scrapeTargets returns the Prometheus jobs' targets and metrics paths.
func scrapeTargets(t *testing.T) map[string]struct {
	path    string
	targets []string
} {
	t.Helper()
	var doc prometheusDoc
	decodeStrict(t, prometheusConfig, &doc)
	jobs := map[string]struct {
		path    string
		targets []string
	}{}
	for _, sc := range doc.ScrapeConfigs {
		j := jobs[sc.JobName]
		j.path = cmpOr(sc.MetricsPath, "/metrics")
		for _, st := range sc.StaticConfigs {
			j.targets = append(j.targets, st.Targets...)
		}
		jobs[sc.JobName] = j
	}
	return jobs
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// envoyAdminPort returns the port Prometheus scrapes Envoy on.
func envoyAdminPort(t *testing.T) uint32 {
	t.Helper()
	targets := scrapeTargets(t)[svcEnvoy].targets
	if len(targets) != 1 {
		t.Fatalf("%s: envoy job targets %v, want one", prometheusConfig, targets)
	}
	return portOf(t, targets[0])
}

func TestPrometheusScrapesComposeServices(t *testing.T) {
	_, httpPort := defaultPorts(t)
	jobs := scrapeTargets(t)
	want := map[string]string{
		svcTollgate: fmt.Sprintf("%s:%d /metrics", svcTollgate, httpPort),
		svcEnvoy:    fmt.Sprintf("%s:%d /stats/prometheus", svcEnvoy, 9901),
	}
	if got := slices.Sorted(maps.Keys(jobs)); !slices.Equal(got, slices.Sorted(maps.Keys(want))) {
		t.Fatalf("%s: jobs %v, want %v", prometheusConfig, got, slices.Sorted(maps.Keys(want)))
	}
	services := loadCompose(t, observabilityProfile).Services
	for name, j := range jobs {
		if len(j.targets) != 1 || j.targets[0]+" "+j.path != want[name] {
			t.Errorf("job %s scrapes %v at %s, want %s", name, j.targets, j.path, want[name])
			continue
		}
		host, _, _ := net.SplitHostPort(j.targets[0])
		if _, ok := services[host]; !ok {
			t.Errorf("job %s: %s is no compose service", name, host)
		}
	}
	// The mount puts the file where the image reads it.
	prom := composeService(t, loadCompose(t, observabilityProfile), svcPrometheus)
	if !mounts(t, prom, prometheusConfig, "/etc/prometheus/prometheus.yml") {
		t.Errorf("prometheus does not mount %s at /etc/prometheus/prometheus.yml", prometheusConfig)
	}
}

// TestPrometheusLoadsAlertRules checks that the demo's Prometheus loads
// tollgate's alerting rules: prometheus.yml names one rule file, where the
// compose file mounts envoy/observability/alerts.yaml (TestAlertRules checks
// the rules).
func TestPrometheusLoadsAlertRules(t *testing.T) {
	var doc prometheusDoc
	decodeStrict(t, prometheusConfig, &doc)
	if len(doc.RuleFiles) != 1 {
		t.Fatalf("%s: rule_files %q, want one", prometheusConfig, doc.RuleFiles)
	}
	prom := composeService(t, loadCompose(t, observabilityProfile), svcPrometheus)
	if !mounts(t, prom, alertsFile, doc.RuleFiles[0]) {
		t.Errorf("prometheus does not mount %s at %s, the rule file prometheus.yml names", alertsFile, doc.RuleFiles[0])
	}
}

// mounts reports whether s bind-mounts the repository path src at target.
func mounts(t *testing.T, s types.ServiceConfig, src, target string) bool {
	t.Helper()
	abs, err := filepath.Abs(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range s.Volumes {
		if v.Source == abs && v.Target == target {
			return true
		}
	}
	return false
}

// grafanaDatasources is Grafana's datasource provisioning file, decoded
// strictly.
type grafanaDatasources struct {
	APIVersion  int `yaml:"apiVersion"`
	Datasources []struct {
		Name      string `yaml:"name"`
		UID       string `yaml:"uid"`
		Type      string `yaml:"type"`
		Access    string `yaml:"access"`
		URL       string `yaml:"url"`
		IsDefault bool   `yaml:"isDefault"`
		Editable  bool   `yaml:"editable"`
	} `yaml:"datasources"`
}

// grafanaProviders is Grafana's dashboard provisioning file.
type grafanaProviders struct {
	APIVersion int `yaml:"apiVersion"`
	Providers  []struct {
		Name            string `yaml:"name"`
		Folder          string `yaml:"folder"`
		Type            string `yaml:"type"`
		DisableDeletion bool   `yaml:"disableDeletion"`
		AllowUIUpdates  bool   `yaml:"allowUiUpdates"`
		Options         struct {
			Path string `yaml:"path"`
		} `yaml:"options"`
	} `yaml:"providers"`
}

// dashboard is the part of a Grafana dashboard the tests read.
type dashboard struct {
	UID    string  `json:"uid"`
	Title  string  `json:"title"`
	Panels []panel `json:"panels"`
}

type panel struct {
	Title      string     `json:"title"`
	Type       string     `json:"type"`
	Datasource datasource `json:"datasource"`
	Targets    []struct {
		Expr       string     `json:"expr"`
		Datasource datasource `json:"datasource"`
	} `json:"targets"`
}

type datasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

func loadDashboard(t *testing.T) dashboard {
	t.Helper()
	data, err := os.ReadFile(grafanaDashboard)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("%s: %v", grafanaDashboard, err)
	}
	return d
}

func TestGrafanaProvisioning(t *testing.T) {
	var ds grafanaDatasources
	decodeStrict(t, grafanaDatasrc, &ds)
	if ds.APIVersion != 1 || len(ds.Datasources) != 1 {
		t.Fatalf("%s: apiVersion %d, %d datasources; want 1 and 1", grafanaDatasrc, ds.APIVersion, len(ds.Datasources))
	}
	src := ds.Datasources[0]
	if want := "http://prometheus:9090"; src.Type != "prometheus" || src.URL != want {
		t.Errorf("datasource %s at %s, want prometheus at %s", src.Type, src.URL, want)
	}
	p := loadCompose(t, observabilityProfile)
	prom := composeService(t, p, svcPrometheus)
	if !slices.ContainsFunc(prom.Ports, func(port types.ServicePortConfig) bool { return port.Target == 9090 }) {
		t.Errorf("prometheus does not listen on 9090 (ports %+v)", prom.Ports)
	}

	var prov grafanaProviders
	decodeStrict(t, grafanaProvider, &prov)
	if prov.APIVersion != 1 || len(prov.Providers) != 1 || prov.Providers[0].Type != "file" {
		t.Fatalf("%s: want one file provider, got %+v", grafanaProvider, prov)
	}
	grafana := composeService(t, p, svcGrafana)
	if !mounts(t, grafana, filepath.Dir(grafanaDashboard), prov.Providers[0].Options.Path) {
		t.Errorf("grafana does not mount %s at the provider's path %s", filepath.Dir(grafanaDashboard), prov.Providers[0].Options.Path)
	}
	if !mounts(t, grafana, "../envoy/observability/grafana/provisioning", "/etc/grafana/provisioning") {
		t.Error("grafana does not mount envoy/observability/grafana/provisioning at /etc/grafana/provisioning")
	}

	d := loadDashboard(t)
	if d.UID == "" || d.Title == "" {
		t.Errorf("dashboard uid %q, title %q; want both", d.UID, d.Title)
	}
	for _, pn := range d.Panels {
		if pn.Type == "row" {
			continue
		}
		if pn.Datasource.UID != src.UID || len(pn.Targets) == 0 {
			t.Errorf("panel %q: datasource %q, %d queries; want datasource %q and a query", pn.Title, pn.Datasource.UID, len(pn.Targets), src.UID)
		}
		for _, q := range pn.Targets {
			if q.Datasource.UID != src.UID {
				t.Errorf("panel %q: query datasource %q, want %q", pn.Title, q.Datasource.UID, src.UID)
			}
		}
	}
}

// image is what the tests read from the Dockerfile.
type image struct {
	froms       []string
	args        map[string]string // ARG defaults
	env         map[string]string
	user        string
	expose      []string
	healthcheck []string // exec form
	entrypoint  []string
	goBuild     string // the RUN line that runs go build
	copies      [][]string
	binary      string   // where the final stage puts tollgate
	aliases     []string // further paths of the same binary in the final stage
	workdir     string   // the final stage's WORKDIR
}

// configDir returns the directory the image serves rules from: its
// TOLLGATE_CONFIG_DIR, else serve's default config-dir under its WORKDIR.
func (img image) configDir(t *testing.T) string {
	t.Helper()
	if dir := img.env["TOLLGATE_CONFIG_DIR"]; dir != "" {
		return dir
	}
	s, err := app.DefaultSettings()
	if err != nil {
		t.Fatal(err)
	}
	if filepath.IsAbs(s.ConfigDir) || img.workdir == "" {
		return s.ConfigDir
	}
	return filepath.Join(img.workdir, s.ConfigDir)
}

// dockerInstruction is one instruction of a Dockerfile, its continuation
// lines joined.
type dockerInstruction struct {
	cmd  string // upper case
	args string
	line int
}

// readDockerfile splits a Dockerfile into instructions: comments and blank
// lines dropped, lines ending in a backslash joined to the next.
func readDockerfile(t *testing.T) []dockerInstruction {
	t.Helper()
	f, err := os.Open(dockerfile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []dockerInstruction
	var cur strings.Builder
	start := 0
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if cur.Len() == 0 {
			start = n
		}
		if body, cont := strings.CutSuffix(line, `\`); cont {
			cur.WriteString(body + " ")
			continue
		}
		cur.WriteString(line)
		cmd, args, _ := strings.Cut(cur.String(), " ")
		out = append(out, dockerInstruction{cmd: strings.ToUpper(cmd), args: strings.TrimSpace(args), line: start})
		cur.Reset()
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if cur.Len() > 0 {
		t.Fatalf("%s: the last instruction ends in a backslash", dockerfile)
	}
	return out
}

func parseDockerfile(t *testing.T) image {
	t.Helper()
	img := image{args: map[string]string{}, env: map[string]string{}}
	for _, in := range readDockerfile(t) {
		switch in.cmd {
		case "FROM":
			img.froms = append(img.froms, in.args)
			img.workdir = ""
		case "WORKDIR":
			img.workdir = in.args
		case "ARG":
			name, def, _ := strings.Cut(in.args, "=")
			img.args[name] = def
		case "ENV":
			for _, kv := range shellWords(t, in.args) {
				k, v, ok := strings.Cut(kv, "=")
				if !ok {
					t.Fatalf("%s:%d: ENV %q is not KEY=VALUE", dockerfile, in.line, kv)
				}
				img.env[k] = v
			}
		case "USER":
			img.user = in.args
		case "EXPOSE":
			img.expose = append(img.expose, strings.Fields(in.args)...)
		case "HEALTHCHECK":
			_, cmd, ok := strings.Cut(in.args, " CMD ")
			if !ok || json.Unmarshal([]byte(cmd), &img.healthcheck) != nil {
				t.Fatalf("%s:%d: HEALTHCHECK %q is not CMD in exec (JSON) form", dockerfile, in.line, in.args)
			}
		case "ENTRYPOINT":
			if json.Unmarshal([]byte(in.args), &img.entrypoint) != nil {
				t.Fatalf("%s:%d: ENTRYPOINT %q is not in exec (JSON) form", dockerfile, in.line, in.args)
			}
		case "RUN":
			if strings.Contains(in.args, "go build") {
				img.goBuild = in.args
			}
		case "COPY":
			words := strings.Fields(in.args)
			img.copies = append(img.copies, words)
			if len(img.froms) > 1 && slices.Contains(words, "--from=build") {
				if img.binary == "" {
					img.binary = words[len(words)-1]
				} else {
					img.aliases = append(img.aliases, words[len(words)-1])
				}
			}
		}
	}
	return img
}

// shellWords splits s at spaces outside double quotes and drops the
// quotes: enough for the Makefile's and the Dockerfile's build lines.
func shellWords(t *testing.T, s string) []string {
	t.Helper()
	var words []string
	var cur strings.Builder
	quoted, inWord := false, false
	for _, r := range s {
		switch {
		case r == '"':
			quoted, inWord = !quoted, true
		case r == ' ' && !quoted:
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	if quoted {
		t.Fatalf("unbalanced quotes in %q", s)
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words
}

// buildCommand returns the environment assignments and the go build
// arguments of a build line, without -o and its value, or fails.
func buildCommand(t *testing.T, line string) (env, args []string) {
	t.Helper()
	words := shellWords(t, line)
	i := 0
	for i < len(words) && strings.Contains(words[i], "=") {
		env = append(env, words[i])
		i++
	}
	if i+1 >= len(words) || words[i] != "go" || words[i+1] != "build" {
		t.Fatalf("%q is not [ENV=...] go build ...", line)
	}
	for j := i + 2; j < len(words); j++ {
		if words[j] == "-o" {
			j++
			continue
		}
		args = append(args, words[j])
	}
	return env, args
}

func TestDockerfileBuildsLikeMakeBuild(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make is not installed")
	}
	const version = "v9.8.7-test"
	out, err := exec.Command("make", "-s", "-n", "-C", repoRoot, "build", "VERSION="+version, "GO=go").Output()
	if err != nil {
		t.Fatalf("make -n build: %v", err)
	}
	var makeLine string
	for line := range strings.Lines(string(out)) {
		if strings.Contains(line, "go build") {
			makeLine = strings.TrimSpace(line)
		}
	}
	makeEnv, makeArgs := buildCommand(t, makeLine)

	img := parseDockerfile(t)
	if img.goBuild == "" {
		t.Fatalf("%s runs no go build", dockerfile)
	}
	if _, ok := img.args["VERSION"]; !ok {
		t.Fatalf("%s has no ARG VERSION", dockerfile)
	}
	dockerEnv, dockerArgs := buildCommand(t, strings.ReplaceAll(img.goBuild, "${VERSION}", version))
	if !slices.Equal(dockerEnv, makeEnv) || !slices.Equal(dockerArgs, makeArgs) {
		t.Errorf("the Dockerfile builds with\n  %q %q\nmake build with\n  %q %q", dockerEnv, dockerArgs, makeEnv, makeArgs)
	}
	if !slices.Contains(makeEnv, "CGO_ENABLED=0") {
		t.Errorf("make build does not build a static binary: env %q", makeEnv)
	}
	stamp := "-X github.com/tollgatehq/tollgate/pkg/version.Version=" + version
	if ld := flagValue(makeArgs, "-ldflags"); !strings.Contains(ld, stamp) {
		t.Errorf("make build's -ldflags %q do not stamp the version (%q)", ld, stamp)
	}
	// -X is silently ignored for a package the binary does not link.
	deps, err := exec.Command("go", "list", "-deps", "../cmd/tollgate").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	if !slices.Contains(strings.Fields(string(deps)), "github.com/tollgatehq/tollgate/pkg/version") {
		t.Error("cmd/tollgate does not link pkg/version, so the stamp would be lost")
	}
}

// goDirective returns the go version go.mod names.
func goDirective(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^go (\S+)$`).FindSubmatch(data)
	if m == nil {
		t.Fatal("go.mod has no go directive")
	}
	return string(m[1])
}

func TestDockerfileImage(t *testing.T) {
	img := parseDockerfile(t)
	if len(img.froms) != 2 {
		t.Fatalf("%s has %d stages, want 2 (build, run)", dockerfile, len(img.froms))
	}
	if want := "golang:" + goDirective(t) + "-bookworm AS build"; img.froms[0] != want {
		t.Errorf("builder FROM %q, want %q (go.mod's Go)", img.froms[0], want)
	}
	if want := "gcr.io/distroless/static-debian12:nonroot"; img.froms[1] != want {
		t.Errorf("final FROM %q, want %q", img.froms[1], want)
	}
	if user, _, _ := strings.Cut(img.user, ":"); user != "65532" && user != "nonroot" {
		t.Errorf("USER %q, want 65532 or nonroot", img.user)
	}

	grpcPort, httpPort := defaultPorts(t)
	want := []string{strconv.Itoa(int(grpcPort)), strconv.Itoa(int(httpPort))}
	if !slices.Equal(img.expose, want) {
		t.Errorf("EXPOSE %v, want %v (gRPC, HTTP; the debug listener stays on loopback)", img.expose, want)
	}
	// The debug listener (/debug/config lists the overrides; pprof) binds
	// the container's loopback: serve's settings in the image's
	// environment say so.
	s, err := app.LoadSettings(app.Flags(pflag.NewFlagSet("serve", pflag.ContinueOnError)), func(k string) string { return img.env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if host, _, err := net.SplitHostPort(s.Listen.Debug); s.Listen.Debug != "" && (err != nil || !net.ParseIP(host).IsLoopback()) {
		t.Errorf("the image's debug listener binds %q, want the loopback only", s.Listen.Debug)
	}

	// The binary is the entrypoint and the health check.
	if img.binary == "" || !slices.Equal(img.entrypoint, []string{img.binary}) {
		t.Errorf("ENTRYPOINT %q, want [%q], the binary copied from the build stage", img.entrypoint, img.binary)
	}
	if len(img.healthcheck) < 2 || img.healthcheck[0] != img.binary || img.healthcheck[1] != "health" {
		t.Fatalf("HEALTHCHECK %q, want [%s health ...]", img.healthcheck, img.binary)
	}
	if got, want := flagValue(img.healthcheck, "--addr"), fmt.Sprintf("127.0.0.1:%d", grpcPort); got != want {
		t.Errorf("HEALTHCHECK --addr %q, want %q", got, want)
	}

	// config-examples/ is copied to the directory serve reads by default.
	configDir := img.configDir(t)
	if !slices.ContainsFunc(img.copies, func(c []string) bool {
		return slices.Equal(c, []string{"config-examples/", strings.TrimSuffix(configDir, "/") + "/"})
	}) {
		t.Errorf("no COPY config-examples/ %s/ (the image's config directory)", configDir)
	}
	// No TOLLGATE_CONFIG_DIR: it would win over envoyproxy/ratelimit's
	// RUNTIME_ROOT, and the image must serve that environment unchanged.
	if dir, ok := img.env["TOLLGATE_CONFIG_DIR"]; ok {
		t.Errorf("ENV TOLLGATE_CONFIG_DIR=%s would shadow RUNTIME_ROOT; let WORKDIR place the default config directory", dir)
	}

	// The binary also answers to envoyproxy/ratelimit's command path: the
	// same file the build made, copied a second time.
	if !slices.Equal(img.aliases, []string{"/bin/ratelimit"}) {
		t.Errorf("further copies of the binary %q, want [/bin/ratelimit]", img.aliases)
	}
	for _, c := range img.copies {
		if slices.Contains(c, "--from=build") && (len(c) != 3 || c[1] != "/out/tollgate") {
			t.Errorf("COPY %q, want COPY --from=build /out/tollgate <path>", c)
		}
	}
}

// TestTollgateHealthChecksRun runs the image's and the compose service's
// health check commands against a running tollgate and a closed port.
func TestTollgateHealthChecksRun(t *testing.T) {
	img := parseDockerfile(t)
	hc := composeService(t, loadCompose(t), svcTollgate).HealthCheck
	if hc == nil || len(hc.Test) < 2 {
		t.Fatalf("tollgate health check %v", hc)
	}
	svc := startService(t, map[string]string{"api.yaml": searchRules})
	for source, cmd := range map[string][]string{"Dockerfile": img.healthcheck, "docker-compose.yaml": hc.Test[1:]} {
		if len(cmd) < 2 || cmd[0] != img.binary {
			t.Fatalf("%s: health check %q does not run %s", source, cmd, img.binary)
		}
		args := slices.Clone(cmd[1:])
		i := slices.Index(args, "--addr")
		if i < 0 {
			t.Fatalf("%s: health check %q has no --addr", source, cmd)
		}
		for _, tt := range []struct {
			addr string
			code int
		}{
			{svc.grpcAddr, 0},
			{closedAddr(t), 1},
		} {
			args[i+1] = tt.addr
			var stdout, stderr bytes.Buffer
			if code := cli.MainEnv(context.Background(), args, &stdout, &stderr, os.Getenv); code != tt.code {
				t.Errorf("%s: tollgate %s: exit %d, want %d; stdout %q, stderr %q", source, strings.Join(args, " "), code, tt.code, stdout.String(), stderr.String())
			}
		}
	}
}

// closedAddr returns a loopback address that nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// TestConfigDirFromEnvironment checks that a way of choosing the
// config directory, TOLLGATE_CONFIG_DIR, reaches serve.
func TestConfigDirFromEnvironment(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "from-env")
	t.Setenv("TOLLGATE_CONFIG_DIR", missing)
	var stderr bytes.Buffer
	code := cli.MainEnv(context.Background(), []string{"serve", "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--debug-addr", ""},
		&bytes.Buffer{}, &stderr, os.Getenv)
	if code != 1 || !strings.Contains(stderr.String(), missing) {
		t.Errorf("serve with TOLLGATE_CONFIG_DIR=%s: exit %d, stderr %q; want it to load that directory", missing, code, stderr.String())
	}
}

// TestDockerignoreKeepsWhatTheBuildCopies checks that every COPY source of
// the build context is let through .dockerignore, whose first rule ignores
// everything.
func TestDockerignoreKeepsWhatTheBuildCopies(t *testing.T) {
	data, err := os.ReadFile(dockerignore)
	if err != nil {
		t.Fatal(err)
	}
	kept := map[string]bool{}
	var rules []string
	for line := range strings.Lines(string(data)) {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		rules = append(rules, line)
		if p, ok := strings.CutPrefix(line, "!"); ok {
			kept[strings.TrimSuffix(p, "/")] = true
		}
	}
	if len(rules) == 0 || rules[0] != "*" {
		t.Fatalf("%s: first rule %v, want * (send only what is let through)", dockerignore, rules)
	}
	for _, c := range parseDockerfile(t).copies {
		if slices.ContainsFunc(c, func(w string) bool { return strings.HasPrefix(w, "--from=") }) {
			continue
		}
		for _, src := range c[:len(c)-1] {
			if !kept[strings.TrimSuffix(src, "/")] {
				t.Errorf("COPY %s: %s ignores it", src, dockerignore)
			}
			if _, err := os.Stat(filepath.Join(repoRoot, src)); err != nil {
				t.Errorf("COPY %s: %v", src, err)
			}
		}
	}
}

// TestComposeEnvoyHealthCheckRuns runs the envoy service's health check,
// a bash one-liner, against a stand-in for Envoy's admin /ready: it must
// pass when the server is LIVE and fail otherwise.
func TestComposeEnvoyHealthCheckRuns(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("bash is not installed")
	}
	hc := composeService(t, loadCompose(t), svcEnvoy).HealthCheck
	if hc == nil || len(hc.Test) != 4 || !slices.Equal(hc.Test[:3], []string{"CMD", "bash", "-c"}) {
		t.Fatalf("envoy health check %v, want [CMD bash -c SCRIPT]", hc)
	}
	adminTCP := fmt.Sprintf("/dev/tcp/127.0.0.1/%d", envoyAdminPort(t))
	if !strings.Contains(hc.Test[3], adminTCP) {
		t.Fatalf("envoy health check %q does not connect to %s", hc.Test[3], adminTCP)
	}
	for _, tt := range []struct {
		state string
		ok    bool
	}{{"LIVE", true}, {"PRE_INITIALIZING", false}, {"", false}} {
		t.Run(cmpOr(tt.state, "closed port"), func(t *testing.T) {
			addr := closedAddr(t)
			if tt.state != "" {
				srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					// As Envoy's admin: no HTTP/1.0, 503 until LIVE.
					if !r.ProtoAtLeast(1, 1) {
						w.WriteHeader(http.StatusUpgradeRequired)
						return
					}
					if r.URL.Path != "/ready" {
						http.NotFound(w, r)
						return
					}
					if tt.state != "LIVE" {
						w.WriteHeader(http.StatusServiceUnavailable)
					}
					fmt.Fprintln(w, tt.state)
				}))
				defer srv.Close()
				addr = srv.Listener.Addr().String()
			}
			host, port, _ := net.SplitHostPort(addr)
			script := strings.ReplaceAll(hc.Test[3], adminTCP, "/dev/tcp/"+host+"/"+port)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			out, err := exec.CommandContext(ctx, bash, "-c", script).CombinedOutput()
			if (err == nil) != tt.ok {
				t.Errorf("health check against %q: %v (output %q), want success %v", tt.state, err, out, tt.ok)
			}
		})
	}
}
