package ratelimitenv

import (
	"errors"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// mapSource is a Source over a map: the settings tollgate's own sources
// set are the keys of own, and Set records what the mapping gives.
type mapSource struct {
	keys []string
	own  map[string]bool
	set  map[string]any
}

func (s *mapSource) AllKeys() []string     { return s.keys }
func (s *mapSource) IsSet(key string) bool { return s.own[key] || s.set[key] != nil }
func (s *mapSource) Set(key string, v any) { s.set[key] = v }

// secretVars are the variables whose values are secrets: no error names
// them either.
var secretVars = []string{"REDIS_AUTH", "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS"}

// digits are runs of digits, which the report writes as counts.
var digits = regexp.MustCompile(`[0-9]+`)

// FuzzApply maps an arbitrary environment, "NAME=value" lines (a name that
// is no variable of the mapping picks one by its bytes), onto a Source
// whose own settings are chosen by the bits of own. It asserts that Apply
// never panics; that every error it joins wraps ErrVariable; that the
// report honours only variables of the mapping, each once; and that no
// variable's value of at least 8 bytes shows in the report, nor the value
// of a secret one in the errors. A value is looked for with its runs of
// digits made alike, and only when it is not a piece of the package's own
// text, which messages are made of.
func FuzzApply(f *testing.F) {
	for _, seed := range []string{
		"REDIS_URL=redis.internal:6379\nREDIS_AUTH=user:s3cret-passw0rd\nREDIS_TLS=true\nREDIS_TLS_CACERT=/etc/ca.pem",
		"REDIS_TYPE=sentinel\nREDIS_URL=mymaster,sentinel-1:26379,sentinel-2:26379\nREDIS_POOL_SIZE=ten\nREDIS_AUTH=only-a-password-value",
		"REDIS_TYPE=cluster\nREDIS_URL= a:1 , ,b:2\nREDIS_PIPELINE_WINDOW=150us\nREDIS_PIPELINE_LIMIT=8",
		"CONFIG_TYPE=GRPC_XDS_SOTW\nCONFIG_GRPC_XDS_SERVER_URL=xds:18000\nCONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS=authorization:Bearer tok-abcdef123456,x-bad-pair-secret-value",
		"CONFIG_GRPC_XDS_NODE_METADATA=a=b,c,=d\nCONFIG_GRPC_XDS_NODE_ID=node-1\nXDS_CLIENT_BACKOFF_INITIAL_INTERVAL=soon",
		"RUNTIME_ROOT=/data\nRUNTIME_SUBDIRECTORY=ratelimit\nRUNTIME_IGNOREDOTFILES=false\nRUNTIME_WATCH_ROOT=maybe",
		"BACKEND_TYPE=memcache\nGRPC_UDS=/tmp/sock\nPROTO=udp\nLOG_LEVEL=verbose-level\nLOG_FORMAT=logfmt",
		"USE_STATSD=true\nHOST=0.0.0.0\nPORT=99999\nGRPC_PORT=-1\nDEBUG_HOST=::1",
		"GRPC_SERVER_USE_TLS=true\nGRPC_SERVER_TLS_CERT=/c\nGRPC_CLIENT_TLS_SAN=san.example\nTRACING_ENABLED=true\nTRACING_SAMPLING_RATE=2",
		"LOG_FORMAT=logfmt-extended\nLIMIT_RESPONSE_HEADERS_ENABLED=yes\nSHADOW_MODE=1\nLOCAL_CACHE_SIZE_IN_BYTES=1024\nSTOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true",
		"NOT_A_VARIABLE=value-of-sixteen-b\nBACKEND_TYPE=redis",
		"PORT=8080",
		"",
	} {
		f.Add(seed, uint64(0))
		f.Add(seed, ^uint64(0))
	}
	source, err := packageText()
	if err != nil {
		f.Fatal(err)
	}
	all := vars()
	var keys []string
	for _, v := range all {
		for k := range strings.SplitSeq(v.Setting, ", ") {
			if k != "" && !slices.Contains(keys, k) {
				keys = append(keys, k)
			}
		}
	}
	keys = append(keys, "default-algorithm", "default-charge", "redis-password-file", "redis-username")

	f.Fuzz(func(t *testing.T, environ string, own uint64) {
		env := map[string]string{}
		for line := range strings.Lines(environ) {
			name, value, _ := strings.Cut(strings.TrimRight(line, "\n"), "=")
			if !slices.ContainsFunc(all, func(v variable) bool { return v.Name == name }) {
				sum := 0
				for _, b := range []byte(name) {
					sum += int(b)
				}
				name = all[sum%len(all)].Name
			}
			env[name] = value
		}
		src := &mapSource{keys: keys, own: map[string]bool{}, set: map[string]any{}}
		for i, k := range keys {
			if own&(1<<(i%64)) != 0 {
				src.own[k] = true
			}
		}
		report, err := Apply(src, func(name string) string { return env[name] })

		var errs []error
		if joined, ok := err.(interface{ Unwrap() []error }); ok {
			errs = joined.Unwrap()
		} else if err != nil {
			errs = []error{err}
		}
		for _, e := range errs {
			if !errors.Is(e, ErrVariable) {
				t.Fatalf("error %q does not wrap ErrVariable", e)
			}
		}
		for i, name := range report.Honoured {
			if !slices.ContainsFunc(all, func(v variable) bool { return v.Name == name }) || slices.Index(report.Honoured, name) != i {
				t.Fatalf("honoured %q: no variable, or twice", report.Honoured)
			}
		}

		text := digits.ReplaceAllString(strings.Join(report.Warnings, "\n")+"\n"+strings.Join(report.Honoured, ","), "0")
		var errText string
		if err != nil {
			errText = digits.ReplaceAllString(err.Error(), "0")
		}
		// An error may quote the value of a variable that is no secret,
		// which may hold a secret's value: only the rest of it counts.
		errRest := errText
		for name, value := range env {
			if !slices.Contains(secretVars, name) {
				if value = digits.ReplaceAllString(strings.TrimSpace(value), "0"); value != "" {
					errRest = strings.ReplaceAll(errRest, value, "")
				}
			}
		}
		for name, value := range env {
			value = digits.ReplaceAllString(strings.TrimSpace(value), "0")
			if len(value) < 8 || strings.Contains(source, value) {
				continue
			}
			if strings.Contains(text, value) {
				t.Fatalf("the report shows the value of %s, %q:\n%+v\nown settings: %q", name, env[name], report, slices.Sorted(maps.Keys(src.own)))
			}
			if slices.Contains(secretVars, name) && strings.Contains(errRest, value) {
				t.Fatalf("an error shows the value of %s, %q: %v", name, env[name], err)
			}
		}
	})
}

// packageText returns the package's source files, the text messages are
// made of, with runs of digits made alike and "%d" as a digit.
func packageText() (string, error) {
	var b strings.Builder
	for _, name := range []string{"apply.go", "ratelimitenv.go", "vars.go"} {
		data, err := os.ReadFile(name)
		if err != nil {
			return "", err
		}
		b.Write(data)
	}
	return digits.ReplaceAllString(strings.ReplaceAll(b.String(), "%d", "0"), "0"), nil
}
