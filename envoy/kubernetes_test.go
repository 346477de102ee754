package envoy_test

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"testing/fstest"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"github.com/tollgatehq/tollgate/pkg/app"
	"github.com/tollgatehq/tollgate/pkg/descriptor"
	"github.com/tollgatehq/tollgate/pkg/httpapi"
)

var update = flag.Bool("update", false, "rewrite kubernetes/rules.yaml from config-examples/")

// The names the manifests give tollgate's parts.
const (
	namespace     = "tollgate"
	rulesFile     = "kubernetes/rules.yaml"
	rulesMap      = "tollgate-rules"
	tollgateName  = "tollgate"
	redisName     = "redis"
	nonRootUID    = 65532
	readinessPath = "/readyz"
	livenessPath  = "/healthz"
)

// document is one YAML document of a manifest file.
type document struct {
	file string
	line int // of the document's first line
	data []byte
}

func (d document) String() string { return fmt.Sprintf("%s:%d", d.file, d.line) }

// splitDocuments splits a multi-document YAML file on its "---" lines and
// drops documents that hold only comments.
func splitDocuments(file string, data []byte) []document {
	var docs []document
	var cur bytes.Buffer
	start, empty := 1, true
	flush := func(next int) {
		if !empty {
			docs = append(docs, document{file: file, line: start, data: bytes.Clone(cur.Bytes())})
		}
		cur.Reset()
		start, empty = next, true
	}
	for i, line := range strings.SplitAfter(string(data), "\n") {
		if strings.TrimRight(line, " \r\n") == "---" {
			flush(i + 2)
			continue
		}
		if t := strings.TrimSpace(line); t != "" && !strings.HasPrefix(t, "#") {
			empty = false
		}
		cur.WriteString(line)
	}
	flush(0)
	return docs
}

// objects holds the decoded manifests by kind.
type objects struct {
	namespaces  []*corev1.Namespace
	configMaps  []*corev1.ConfigMap
	services    []*corev1.Service
	deployments []*appsv1.Deployment
	pdbs        []*policyv1.PodDisruptionBudget
	where       map[any]document
}

// decodeManifest decodes one document strictly into the API type its
// apiVersion and kind name.
func (o *objects) decode(d document) error {
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal(d.data, &tm); err != nil {
		return fmt.Errorf("%s: %w", d, err)
	}
	var obj any
	switch tm.APIVersion + " " + tm.Kind {
	case "v1 Namespace":
		v := &corev1.Namespace{}
		o.namespaces, obj = append(o.namespaces, v), v
	case "v1 ConfigMap":
		v := &corev1.ConfigMap{}
		o.configMaps, obj = append(o.configMaps, v), v
	case "v1 Service":
		v := &corev1.Service{}
		o.services, obj = append(o.services, v), v
	case "apps/v1 Deployment":
		v := &appsv1.Deployment{}
		o.deployments, obj = append(o.deployments, v), v
	case "policy/v1 PodDisruptionBudget":
		v := &policyv1.PodDisruptionBudget{}
		o.pdbs, obj = append(o.pdbs, v), v
	default:
		return fmt.Errorf("%s: apiVersion %q kind %q is not one the test knows", d, tm.APIVersion, tm.Kind)
	}
	if err := yaml.UnmarshalStrict(d.data, obj); err != nil {
		return fmt.Errorf("%s: %s: %w", d, tm.Kind, err)
	}
	o.where[obj] = d
	return nil
}

func loadManifests(t *testing.T) *objects {
	t.Helper()
	o := &objects{where: map[any]document{}}
	for _, name := range yamlFiles(t) {
		if kind(name) != "kubernetes" {
			continue
		}
		data, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range splitDocuments(name, data) {
			if err := o.decode(d); err != nil {
				t.Error(err)
			}
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	return o
}

func (o *objects) deployment(name string) *appsv1.Deployment {
	for _, d := range o.deployments {
		if d.Name == name {
			return d
		}
	}
	return nil
}

func (o *objects) service(name string) *corev1.Service {
	for _, s := range o.services {
		if s.Name == name {
			return s
		}
	}
	return nil
}

// selected returns the deployments whose pods sel selects.
func (o *objects) selected(ns string, sel labels.Selector) []*appsv1.Deployment {
	var out []*appsv1.Deployment
	for _, d := range o.deployments {
		if d.Namespace == ns && sel.Matches(labels.Set(d.Spec.Template.Labels)) {
			out = append(out, d)
		}
	}
	return out
}

// TestKubernetesManifests decodes every manifest under kubernetes/ with
// the Kubernetes API types, strictly, and checks that the objects fit
// together and fit tollgate.
func TestKubernetesManifests(t *testing.T) {
	o := loadManifests(t)

	t.Run("namespaces", func(t *testing.T) {
		if len(o.namespaces) != 1 || o.namespaces[0].Name != namespace {
			t.Fatalf("want one Namespace %q", namespace)
		}
		for obj, d := range o.where {
			m, err := metaOf(obj)
			if err != nil {
				t.Fatal(err)
			}
			if _, isNS := obj.(*corev1.Namespace); !isNS && m.Namespace != namespace {
				t.Errorf("%s: %s is in namespace %q, want %q", d, m.Name, m.Namespace, namespace)
			}
		}
	})

	t.Run("selectors", func(t *testing.T) {
		for _, dep := range o.deployments {
			sel, err := metav1.LabelSelectorAsSelector(dep.Spec.Selector)
			if err != nil {
				t.Fatalf("%s: %v", o.where[dep], err)
			}
			if sel.Empty() || !sel.Matches(labels.Set(dep.Spec.Template.Labels)) {
				t.Errorf("%s: Deployment %s: selector %s does not select its own pods %v", o.where[dep], dep.Name, sel, dep.Spec.Template.Labels)
			}
		}
		for _, svc := range o.services {
			deps := o.selected(svc.Namespace, labels.SelectorFromSet(svc.Spec.Selector))
			if len(svc.Spec.Selector) == 0 || len(deps) != 1 {
				t.Errorf("%s: Service %s selects %d Deployments, want 1", o.where[svc], svc.Name, len(deps))
				continue
			}
			for _, p := range svc.Spec.Ports {
				if _, err := containerPort(deps[0].Spec.Template.Spec.Containers, p.TargetPort); err != nil {
					t.Errorf("%s: Service %s port %s: %v", o.where[svc], svc.Name, p.Name, err)
				}
			}
		}
		for _, pdb := range o.pdbs {
			sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
			if err != nil {
				t.Fatalf("%s: %v", o.where[pdb], err)
			}
			deps := o.selected(pdb.Namespace, sel)
			if len(deps) != 1 {
				t.Errorf("%s: PodDisruptionBudget %s selects %d Deployments, want 1", o.where[pdb], pdb.Name, len(deps))
				continue
			}
			replicas := int32(1)
			if deps[0].Spec.Replicas != nil {
				replicas = *deps[0].Spec.Replicas
			}
			if min := pdb.Spec.MinAvailable; min == nil || min.Type != intstr.Int || min.IntVal >= replicas {
				t.Errorf("%s: PodDisruptionBudget %s: minAvailable %v must be a number below the %d replicas, or no pod could ever be evicted", o.where[pdb], pdb.Name, min, replicas)
			}
		}
	})

	dep := o.deployment(tollgateName)
	if dep == nil {
		t.Fatalf("no Deployment %q", tollgateName)
	}
	pod := dep.Spec.Template.Spec
	if len(pod.Containers) != 1 {
		t.Fatalf("Deployment %s: want one container, got %d", tollgateName, len(pod.Containers))
	}
	c := pod.Containers[0]
	args := parseArgs(t, c.Args)

	t.Run("flags", func(t *testing.T) {
		known := serveFlags(t)
		for name := range args {
			if !known[name] {
				t.Errorf("tollgate serve has no flag --%s", name)
			}
		}
		for _, e := range c.Env {
			if name, ok := strings.CutPrefix(e.Name, "TOLLGATE_"); ok {
				if flagName := strings.ToLower(strings.ReplaceAll(name, "_", "-")); !known[flagName] && name != "REDIS_PASSWORD" {
					t.Errorf("env %s names no setting of tollgate serve", e.Name)
				}
			}
		}
	})

	t.Run("ports", func(t *testing.T) {
		grpcPort, httpPort := defaultPorts(t)
		for flagName, want := range map[string]uint32{"grpc-addr": grpcPort, "http-addr": httpPort} {
			if v, ok := args[flagName]; ok {
				want = addrPort(t, v)
			}
			name := strings.TrimSuffix(flagName, "-addr")
			got, err := containerPort(pod.Containers, intstr.FromString(name))
			if err != nil {
				t.Errorf("container port %q: %v", name, err)
			} else if uint32(got) != want {
				t.Errorf("container port %q is %d, tollgate listens on %d", name, got, want)
			}
		}
		svc := o.service(tollgateName)
		if svc == nil {
			t.Fatalf("no Service %q", tollgateName)
		}
		var grpcSvc *corev1.ServicePort
		for i := range svc.Spec.Ports {
			if svc.Spec.Ports[i].Name == "grpc" {
				grpcSvc = &svc.Spec.Ports[i]
			}
		}
		if grpcSvc == nil || grpcSvc.AppProtocol == nil || *grpcSvc.AppProtocol != "grpc" {
			t.Errorf("Service %s: want a port named grpc with appProtocol grpc, so that meshes speak HTTP/2 to it", svc.Name)
		} else if grpcSvc.Port != int32(grpcPort) {
			t.Errorf("Service %s: grpc port %d, want %d like Envoy's configurations", svc.Name, grpcSvc.Port, grpcPort)
		}
	})

	t.Run("probes", func(t *testing.T) {
		_, httpPort := defaultPorts(t)
		h := httpapi.New(httpapi.Options{})
		for _, p := range []struct {
			name  string
			probe *corev1.Probe
			path  string
		}{{"readinessProbe", c.ReadinessProbe, readinessPath}, {"livenessProbe", c.LivenessProbe, livenessPath}} {
			if p.probe == nil || p.probe.HTTPGet == nil {
				t.Errorf("%s: want an httpGet probe", p.name)
				continue
			}
			get := p.probe.HTTPGet
			if get.Path != p.path {
				t.Errorf("%s: path %q, want %q", p.name, get.Path, p.path)
			}
			if port, err := containerPort(pod.Containers, get.Port); err != nil || uint32(port) != httpPort {
				t.Errorf("%s: port %s is %d (%v), want tollgate's HTTP port %d", p.name, get.Port.String(), port, err, httpPort)
			}
			// The path must be one tollgate's HTTP handler really serves.
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, get.Path, nil))
			if rec.Code != http.StatusOK {
				t.Errorf("%s: GET %s on tollgate's HTTP handler answers %d", p.name, get.Path, rec.Code)
			}
		}
	})

	t.Run("rules mount", func(t *testing.T) {
		dir := args["config-dir"]
		var vol *corev1.Volume
		for i := range pod.Volumes {
			if cm := pod.Volumes[i].ConfigMap; cm != nil && cm.Name == rulesMap {
				vol = &pod.Volumes[i]
			}
		}
		if vol == nil {
			t.Fatalf("no volume of ConfigMap %s", rulesMap)
		}
		if len(vol.ConfigMap.Items) > 0 {
			t.Errorf("volume %s lists items: a file added to the ConfigMap would not appear", vol.Name)
		}
		var mount *corev1.VolumeMount
		for i := range c.VolumeMounts {
			if c.VolumeMounts[i].Name == vol.Name {
				mount = &c.VolumeMounts[i]
			}
		}
		switch {
		case mount == nil:
			t.Errorf("volume %s is not mounted", vol.Name)
		case mount.SubPath != "" || mount.SubPathExpr != "":
			t.Errorf("volume %s is mounted with a subPath: kubelet never updates those, so rules would not reload", vol.Name)
		case path.Clean(mount.MountPath) != path.Clean(dir):
			t.Errorf("rules are mounted at %s, but --config-dir is %q", mount.MountPath, dir)
		}
	})

	t.Run("redis", func(t *testing.T) {
		if args["store"] != "redis" {
			t.Fatalf("--store is %q, want redis", args["store"])
		}
		svc := o.service(redisName)
		if svc == nil || o.deployment(redisName) == nil {
			t.Fatalf("want a Deployment and a Service %q", redisName)
		}
		host, port, ok := strings.Cut(args["redis-addrs"], ":")
		if !ok {
			t.Fatalf("--redis-addrs %q is not HOST:PORT", args["redis-addrs"])
		}
		if host != svc.Name && host != svc.Name+"."+svc.Namespace+".svc.cluster.local" {
			t.Errorf("--redis-addrs host %q is not the Service %s", host, svc.Name)
		}
		if n, err := strconv.Atoi(port); err != nil || !slices.ContainsFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return int(p.Port) == n }) {
			t.Errorf("--redis-addrs port %s is not a port of Service %s", port, svc.Name)
		}
	})

	t.Run("security", func(t *testing.T) {
		for _, dep := range o.deployments {
			pod := dep.Spec.Template.Spec
			for _, c := range pod.Containers {
				problems := securityProblems(pod.SecurityContext, c.SecurityContext)
				if dep.Name == tollgateName {
					if uid := runAsUser(pod.SecurityContext, c.SecurityContext); uid == nil || *uid != nonRootUID {
						problems = append(problems, fmt.Sprintf("runAsUser must be %d, the image's user", nonRootUID))
					}
				}
				for _, p := range problems {
					t.Errorf("%s: container %s/%s: %s", o.where[dep], dep.Name, c.Name, p)
				}
			}
		}
	})

	t.Run("rules", func(t *testing.T) {
		var cm *corev1.ConfigMap
		for _, m := range o.configMaps {
			if m.Name == rulesMap {
				cm = m
			}
		}
		if cm == nil {
			t.Fatalf("no ConfigMap %q", rulesMap)
		}
		entries, err := os.ReadDir(configExamples)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			want, err := os.ReadFile(path.Join(configExamples, e.Name()))
			if err != nil {
				t.Fatal(err)
			}
			if got, ok := cm.Data[e.Name()]; !ok || got != string(want) {
				t.Errorf("%s: key %s does not hold config-examples/%s as it is", rulesFile, e.Name(), e.Name())
			}
		}
		fsys := fstest.MapFS{}
		for name, text := range cm.Data {
			fsys[name] = &fstest.MapFile{Data: []byte(text)}
		}
		s, err := app.DefaultSettings()
		if err != nil {
			t.Fatal(err)
		}
		opts, err := serveOptions(s)
		if err != nil {
			t.Fatal(err)
		}
		tree, err := descriptor.LoadFS(fsys, opts)
		if err != nil {
			t.Fatalf("%s: the rules do not load: %v", rulesFile, err)
		}
		if len(tree.Domains()) == 0 {
			t.Errorf("%s: no domains", rulesFile)
		}
	})
}

// TestRulesConfigMapIsCurrent checks that kubernetes/rules.yaml holds
// config-examples/ exactly; -update rewrites it.
func TestRulesConfigMapIsCurrent(t *testing.T) {
	want, err := rulesConfigMap()
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.WriteFile(rulesFile, want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from config-examples/; run go test ./envoy -run TestRulesConfigMapIsCurrent -update", rulesFile)
	}
}

// rulesConfigMap renders config-examples/ as the ConfigMap of rules.
func rulesConfigMap() ([]byte, error) {
	entries, err := os.ReadDir(configExamples)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	b.WriteString(`# tollgate's rules: config-examples/, one key per file. Generated by
#   go test ./envoy -run TestRulesConfigMapIsCurrent -update
# so edit the files there. tollgate mounts the whole ConfigMap as its
# --config-dir and reloads when kubelet swaps in an update (within about a
# minute of kubectl apply). For your own rules:
#   kubectl -n tollgate create configmap tollgate-rules --from-file=RULES_DIR/ \
#     --dry-run=client -o yaml | kubectl apply -f -
apiVersion: v1
kind: ConfigMap
metadata:
  name: tollgate-rules
  namespace: tollgate
  labels:
    app.kubernetes.io/name: tollgate
data:
`)
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".yaml") {
			continue
		}
		data, err := os.ReadFile(path.Join(configExamples, e.Name()))
		if err != nil {
			return nil, err
		}
		if !bytes.HasSuffix(data, []byte("\n")) || bytes.Contains(data, []byte("\t")) || bytes.Contains(data, []byte(" \n")) {
			return nil, fmt.Errorf("%s: a literal block needs a final newline and no tabs or trailing blanks", e.Name())
		}
		fmt.Fprintf(&b, "  %s: |\n", e.Name())
		for _, line := range strings.SplitAfter(strings.TrimSuffix(string(data), "\n"), "\n") {
			if strings.TrimSpace(line) == "" {
				b.WriteString("\n")
				continue
			}
			b.WriteString("    " + line)
		}
		b.WriteString("\n")
	}
	return b.Bytes(), nil
}

// parseArgs reads `serve --name=value` arguments into a map.
func parseArgs(t *testing.T, args []string) map[string]string {
	t.Helper()
	if len(args) == 0 || args[0] != "serve" {
		t.Fatalf("args %q: want the serve command first", args)
	}
	out := map[string]string{}
	for _, a := range args[1:] {
		name, value, ok := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if !ok || !strings.HasPrefix(a, "--") {
			t.Fatalf("arg %q: write flags as --name=value", a)
		}
		out[name] = value
	}
	return out
}

var flagName = regexp.MustCompile(`--([a-z0-9][a-z0-9-]*)`)

// serveFlags returns the flag names that `tollgate serve --help` lists.
func serveFlags(t *testing.T) map[string]bool {
	t.Helper()
	var out, errOut bytes.Buffer
	if code := app.Main(context.Background(), []string{"serve", "--help"}, &out, &errOut); code != 0 {
		t.Fatalf("tollgate serve --help: exit %d: %s", code, errOut.String())
	}
	known := map[string]bool{}
	for _, m := range flagName.FindAllStringSubmatch(out.String()+errOut.String(), -1) {
		known[m[1]] = true
	}
	if !known["config-dir"] {
		t.Fatalf("tollgate serve --help lists no --config-dir:\n%s%s", out.String(), errOut.String())
	}
	return known
}

// containerPort resolves a port reference, by name or number, among the
// ports of containers.
func containerPort(containers []corev1.Container, ref intstr.IntOrString) (int32, error) {
	for _, c := range containers {
		for _, p := range c.Ports {
			if (ref.Type == intstr.String && p.Name == ref.StrVal) || (ref.Type == intstr.Int && p.ContainerPort == ref.IntVal) {
				return p.ContainerPort, nil
			}
		}
	}
	return 0, fmt.Errorf("no container port %s", ref.String())
}

func runAsUser(pod *corev1.PodSecurityContext, c *corev1.SecurityContext) *int64 {
	if c != nil && c.RunAsUser != nil {
		return c.RunAsUser
	}
	if pod != nil {
		return pod.RunAsUser
	}
	return nil
}

// securityProblems lists what keeps a container from running as the
// restricted Pod Security Standard asks, with a read-only root.
func securityProblems(pod *corev1.PodSecurityContext, c *corev1.SecurityContext) []string {
	var problems []string
	nonRoot := (c != nil && c.RunAsNonRoot != nil && *c.RunAsNonRoot) || (pod != nil && pod.RunAsNonRoot != nil && *pod.RunAsNonRoot)
	if !nonRoot {
		problems = append(problems, "runAsNonRoot is not true")
	}
	if uid := runAsUser(pod, c); uid != nil && *uid == 0 {
		problems = append(problems, "runAsUser is 0")
	}
	if c == nil {
		return append(problems, "no securityContext")
	}
	if c.ReadOnlyRootFilesystem == nil || !*c.ReadOnlyRootFilesystem {
		problems = append(problems, "readOnlyRootFilesystem is not true")
	}
	if c.AllowPrivilegeEscalation == nil || *c.AllowPrivilegeEscalation {
		problems = append(problems, "allowPrivilegeEscalation is not false")
	}
	if c.Capabilities == nil || !slices.Contains(c.Capabilities.Drop, "ALL") {
		problems = append(problems, "capabilities do not drop ALL")
	}
	seccomp := (c.SeccompProfile != nil) || (pod != nil && pod.SeccompProfile != nil)
	if !seccomp {
		problems = append(problems, "no seccompProfile")
	}
	return problems
}

// metaOf returns the ObjectMeta of a decoded object.
func metaOf(obj any) (metav1.ObjectMeta, error) {
	if o, ok := obj.(metav1.ObjectMetaAccessor); ok {
		m := o.GetObjectMeta()
		return metav1.ObjectMeta{Name: m.GetName(), Namespace: m.GetNamespace()}, nil
	}
	return metav1.ObjectMeta{}, fmt.Errorf("%T has no ObjectMeta", obj)
}
