package redis

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tollgatehq/tollgate/pkg/store"
)

// ErrUnsupportedVersion reports a server older than the store supports:
// Redis 6.2 (Valkey, from 7.2, always qualifies). It wraps
// store.ErrUnavailable, so rules answer by their failure modes.
var ErrUnsupportedVersion = fmt.Errorf("%w: unsupported server version", store.ErrUnavailable)

// minimum is the oldest Redis the script runs on, as the error names it.
const minimum = "Redis 6.2 (or Valkey 7.2)"

// serverVersion is what a server reports of itself in INFO server.
type serverVersion struct {
	name                string // "Redis" or "Valkey"
	major, minor, patch int
}

func (v serverVersion) String() string {
	return fmt.Sprintf("%s %d.%d.%d", v.name, v.major, v.minor, v.patch)
}

// supported reports whether the script runs on v.
func (v serverVersion) supported() bool {
	return v.name == "Valkey" || v.major > 6 || (v.major == 6 && v.minor >= 2)
}

// functions reports whether v has Redis Functions (FUNCTION LOAD, FCALL).
func (v serverVersion) functions() bool {
	return v.name == "Valkey" || v.major >= 7
}

// parseVersion reads the server's version from the reply to INFO server:
// valkey_version when present (Valkey reports redis_version 7.2.4 for
// compatibility), else redis_version.
func parseVersion(info string) (serverVersion, error) {
	fields := map[string]string{}
	for _, line := range strings.Split(info, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			fields[k] = v
		}
	}
	v := serverVersion{name: "Redis"}
	text, ok := fields["redis_version"]
	if vk, isValkey := fields["valkey_version"]; isValkey {
		v.name, text, ok = "Valkey", vk, true
	}
	if !ok {
		return v, errors.New("INFO server reports no redis_version")
	}
	parts := strings.Split(text, ".")
	nums := make([]int, 3)
	for i := range nums {
		if i >= len(parts) {
			break
		}
		n, err := strconv.Atoi(parts[i])
		if err != nil || n < 0 {
			return v, fmt.Errorf("INFO server reports version %q, want major.minor.patch", text)
		}
		nums[i] = n
	}
	if len(parts) < 2 || len(parts) > 3 {
		return v, fmt.Errorf("INFO server reports version %q, want major.minor.patch", text)
	}
	v.major, v.minor, v.patch = nums[0], nums[1], nums[2]
	return v, nil
}

// serverState is what the store knows of its servers from their last check.
type serverState struct {
	// err is nil when every server runs the script, else an error wrapping
	// ErrUnsupportedVersion that names the version found.
	err error
	// functions reports that every server has Redis Functions.
	functions bool
	// versions describes the servers, for the log.
	versions string
	// recheck is when a server too old is asked again.
	recheck time.Time
}

// checkServers reads the version of every server: the one server, or each
// node of a Cluster, masters and replicas. It fails only when a server
// cannot be asked.
func (s *Store) checkServers(ctx context.Context) (*serverState, error) {
	var (
		mu       sync.Mutex
		versions []serverVersion
		addrs    []string
	)
	check := func(ctx context.Context, c *goredis.Client) error {
		info, err := c.Info(ctx, "server").Result()
		if err != nil {
			return err
		}
		v, err := parseVersion(info)
		if err != nil {
			return fmt.Errorf("%s: %w", c.Options().Addr, err)
		}
		mu.Lock()
		versions, addrs = append(versions, v), append(addrs, c.Options().Addr)
		mu.Unlock()
		return nil
	}
	var err error
	switch c := s.client.(type) {
	case *goredis.ClusterClient:
		err = c.ForEachShard(ctx, check)
	case *goredis.Client:
		err = check(ctx, c)
	default:
		info, ierr := s.client.Info(ctx, "server").Result()
		var v serverVersion
		if err = ierr; err == nil {
			v, err = parseVersion(info)
		}
		versions, addrs = append(versions, v), append(addrs, "the server")
	}
	if err != nil {
		return nil, fmt.Errorf("reading the server version: %w", err)
	}
	st := &serverState{functions: len(versions) > 0 && !s.scriptsOnly && !s.noFunctions.Load()}
	var names []string
	for i, v := range versions {
		names = append(names, addrs[i]+" "+v.String())
		if !v.supported() && st.err == nil {
			st.err = fmt.Errorf("%w: %s at %s is older than the minimum, %s", ErrUnsupportedVersion, v, addrs[i], minimum)
		}
		st.functions = st.functions && v.functions()
	}
	slices.Sort(names) // a Cluster's nodes answer in any order
	st.versions = strings.Join(names, ", ")
	return st, nil
}

// ServerError returns why the store cannot decide on its servers, as far
// as their versions go: nil when every server is supported or none has been
// asked yet, else an error wrapping ErrUnsupportedVersion that names the
// version found and the minimum.
func (s *Store) ServerError() error {
	if st := s.server.Load(); st != nil {
		return st.err
	}
	return nil
}
