package redis

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tollgatehq/tollgate/pkg/tlsfiles"
)

// The deployment types of ClientConfig.Type.
const (
	TypeSingle   = "single"
	TypeSentinel = "sentinel"
	TypeCluster  = "cluster"
)

// redacted replaces a password wherever a ClientConfig is printed.
const redacted = "[redacted]"

// ClientConfig holds the plain settings NewClient builds a client from, as
// flags and environment variables give them.
type ClientConfig struct {
	// Type is the deployment: "single" (also ""), "sentinel" or "cluster".
	Type string
	// Addrs are host:port addresses: the server for single (which may
	// instead be a redis:// or rediss:// URL), the sentinels for sentinel,
	// seed nodes for cluster.
	Addrs []string
	// MasterName is the name the sentinels monitor the master under;
	// sentinel only, and required there.
	MasterName string
	// DB is the database number; a Cluster has only database 0.
	DB int
	// Username and Password authenticate to Redis (ACL user, or
	// requirepass with no Username). Sentinels are reached without them.
	Username, Password string
	// TLS enables TLS. CAFile is a PEM bundle of CAs to trust instead of
	// the system's; CertFile and KeyFile are a client certificate and its
	// key, both or neither; ServerName overrides the name checked in the
	// server's certificate.
	TLS                                   bool
	CAFile, CertFile, KeyFile, ServerName string
	// PoolSize is the number of connections per node; 0 means go-redis's
	// default (ten per CPU).
	PoolSize int
	// DialTimeout, ReadTimeout and WriteTimeout bound each connection step;
	// 0 means go-redis's defaults (5 s, 3 s, 3 s). A caller's context
	// deadline bounds them too.
	DialTimeout, ReadTimeout, WriteTimeout time.Duration
}

// isURL reports whether addr is a URL rather than host:port.
func isURL(addr string) bool { return strings.Contains(addr, "://") }

// typ returns the deployment type, "" meaning single.
func (c ClientConfig) typ() string {
	if c.Type == "" {
		return TypeSingle
	}
	return strings.ToLower(c.Type)
}

// Validate reports every problem of c, reading the TLS files. Its errors
// never contain the password.
func (c ClientConfig) Validate() error {
	_, err := c.tlsConfig()
	return c.scrub(errors.Join(c.validate(), err))
}

// validate checks everything but the TLS files.
func (c ClientConfig) validate() error {
	var errs []error
	typ := c.typ()
	switch typ {
	case TypeSingle, TypeSentinel, TypeCluster:
	default:
		errs = append(errs, fmt.Errorf("unknown redis type %q (want single, sentinel or cluster)", c.Type))
	}
	switch {
	case len(c.Addrs) == 0:
		errs = append(errs, errors.New("no redis address"))
	case typ == TypeSingle && len(c.Addrs) > 1:
		errs = append(errs, fmt.Errorf("redis type single takes one address, got %d (sentinel and cluster take several)", len(c.Addrs)))
	}
	for _, addr := range c.Addrs {
		if !isURL(addr) {
			if err := checkHostPort(addr); err != nil {
				errs = append(errs, err)
			}
			continue
		}
		if typ != TypeSingle {
			errs = append(errs, fmt.Errorf("redis address %s: a URL is only accepted for type single", redactURL(addr)))
			continue
		}
		if _, err := c.parseURL(addr); err != nil {
			errs = append(errs, err)
		}
	}
	if typ == TypeSentinel && c.MasterName == "" {
		errs = append(errs, errors.New("redis type sentinel needs a master name"))
	}
	if typ != TypeSentinel && c.MasterName != "" {
		errs = append(errs, fmt.Errorf("redis master name %q is only used with type sentinel", c.MasterName))
	}
	if c.DB < 0 {
		errs = append(errs, fmt.Errorf("redis db %d is negative", c.DB))
	}
	if typ == TypeCluster && c.DB != 0 {
		errs = append(errs, fmt.Errorf("redis db %d: a cluster has only db 0", c.DB))
	}
	if c.PoolSize < 0 {
		errs = append(errs, fmt.Errorf("redis pool size %d is negative", c.PoolSize))
	}
	for _, d := range []struct {
		name string
		d    time.Duration
	}{{"dial", c.DialTimeout}, {"read", c.ReadTimeout}, {"write", c.WriteTimeout}} {
		if d.d < 0 {
			errs = append(errs, fmt.Errorf("redis %s timeout %v is negative", d.name, d.d))
		}
	}
	return errors.Join(errs...)
}

// checkHostPort checks a host:port address.
func checkHostPort(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("redis address %q: want host:port", addr)
	}
	if host == "" {
		return fmt.Errorf("redis address %q: no host", addr)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("redis address %q: bad port %q", addr, port)
	}
	return nil
}

// parseURL parses a redis:// or rediss:// address into options, with c's
// DB and credentials applied. Its errors name the URL without password.
func (c ClientConfig) parseURL(addr string) (*goredis.Options, error) {
	u, err := url.Parse(addr)
	if err != nil || (u.Scheme != "redis" && u.Scheme != "rediss") {
		return nil, fmt.Errorf("redis address %s: want host:port or a redis:// or rediss:// URL", redactURL(addr))
	}
	opts, err := goredis.ParseURL(addr)
	if err != nil {
		// go-redis errors may quote the URL: name it ourselves.
		return nil, fmt.Errorf("redis address %s: invalid URL", redactURL(addr))
	}
	if opts.Password != "" && c.Password != "" {
		return nil, fmt.Errorf("redis address %s: a password is given both in the URL and in the settings", redactURL(addr))
	}
	if opts.Username != "" && c.Username != "" && opts.Username != c.Username {
		return nil, fmt.Errorf("redis address %s: user %q in the URL, %q in the settings", redactURL(addr), opts.Username, c.Username)
	}
	if opts.DB != 0 && c.DB != 0 && opts.DB != c.DB {
		return nil, fmt.Errorf("redis address %s: db %d in the URL, %d in the settings", redactURL(addr), opts.DB, c.DB)
	}
	return opts, nil
}

// usesTLS reports whether c connects with TLS: TLS is set, or the address
// is a rediss:// URL.
func (c ClientConfig) usesTLS() bool {
	return c.TLS || (len(c.Addrs) == 1 && strings.HasPrefix(c.Addrs[0], "rediss://"))
}

// tlsConfig builds the TLS configuration, nil without TLS, reading the
// files.
func (c ClientConfig) tlsConfig() (*tls.Config, error) {
	if !c.usesTLS() {
		if c.CAFile != "" || c.CertFile != "" || c.KeyFile != "" || c.ServerName != "" {
			return nil, errors.New("redis TLS files or server name given, but TLS is off")
		}
		return nil, nil
	}
	cfg, err := tlsfiles.ClientConfig(tlsfiles.ClientOptions{CAFile: c.CAFile, CertFile: c.CertFile, KeyFile: c.KeyFile, ServerName: c.ServerName})
	if err == nil {
		return cfg, nil
	}
	var errs []error
	if caErr, ok := errors.AsType[*tlsfiles.CAError](err); ok {
		if errors.Is(caErr.Err, tlsfiles.ErrNoCA) {
			errs = append(errs, fmt.Errorf("redis TLS CA %s: no PEM certificate found", c.CAFile))
		} else {
			errs = append(errs, fmt.Errorf("redis TLS CA: %w", caErr.Err))
		}
	}
	if certErr, ok := errors.AsType[*tlsfiles.CertError](err); ok {
		if errors.Is(certErr.Err, tlsfiles.ErrCertWithoutKey) {
			errs = append(errs, errors.New("redis TLS client certificate and key go together: give both or neither"))
		} else {
			errs = append(errs, fmt.Errorf("redis TLS client certificate %s and key %s: %w", c.CertFile, c.KeyFile, certErr.Err))
		}
	}
	if len(errs) == 0 {
		return nil, err
	}
	return nil, errors.Join(errs...)
}

// go-redis's retries are off. The decision script is not idempotent: a
// retry after a lost reply would count the hits twice. And a failed
// decision is answered by the rules' failure modes at once, where go-redis
// would spend the whole deadline redialling a dead server every 100 ms. (A
// Cluster client still follows MOVED and ASK redirections.)
const (
	noRetries    = -1
	dialAttempts = 1
)

// NewClient builds the go-redis client c describes: a *goredis.Client for
// single, a failover *goredis.Client for sentinel, a *goredis.ClusterClient
// for cluster. It validates c first, and does not connect: go-redis dials
// on first use. The client honours context deadlines, and drops its
// connections to a master that a failover demoted as soon as one of them
// answers READONLY (see readonly.go).
func NewClient(c ClientConfig) (goredis.UniversalClient, error) {
	if err := c.validate(); err != nil {
		return nil, c.scrub(err)
	}
	tlsCfg, err := c.tlsConfig()
	if err != nil {
		return nil, c.scrub(err)
	}
	switch c.typ() {
	case TypeSentinel, TypeCluster:
		u := &goredis.UniversalOptions{
			Addrs: c.Addrs, MasterName: c.MasterName, DB: c.DB,
			Username: c.Username, Password: c.Password, TLSConfig: tlsCfg, PoolSize: c.PoolSize,
			DialTimeout: c.DialTimeout, ReadTimeout: c.ReadTimeout, WriteTimeout: c.WriteTimeout,
			MaxRetries: noRetries, DialerRetries: dialAttempts, ContextTimeoutEnabled: true,
		}
		if c.typ() == TypeSentinel {
			client := goredis.NewFailoverClient(u.Failover())
			client.AddHook(new(dropStale))
			return client, nil
		}
		return goredis.NewClusterClient(u.Cluster()), nil
	}
	opts := &goredis.Options{Addr: c.Addrs[0]}
	if isURL(c.Addrs[0]) {
		if opts, err = c.parseURL(c.Addrs[0]); err != nil {
			return nil, c.scrub(err)
		}
	}
	if c.Username != "" {
		opts.Username = c.Username
	}
	if c.Password != "" {
		opts.Password = c.Password
	}
	if c.DB != 0 {
		opts.DB = c.DB
	}
	if tlsCfg != nil {
		if opts.TLSConfig != nil && tlsCfg.ServerName == "" {
			tlsCfg.ServerName = opts.TLSConfig.ServerName // from the URL's host
		}
		opts.TLSConfig = tlsCfg
	}
	if c.PoolSize != 0 {
		opts.PoolSize = c.PoolSize
	}
	if c.DialTimeout != 0 {
		opts.DialTimeout = c.DialTimeout
	}
	if c.ReadTimeout != 0 {
		opts.ReadTimeout = c.ReadTimeout
	}
	if c.WriteTimeout != 0 {
		opts.WriteTimeout = c.WriteTimeout
	}
	opts.MaxRetries, opts.DialerRetries = noRetries, dialAttempts
	opts.ContextTimeoutEnabled = true
	client := goredis.NewClient(opts)
	client.AddHook(new(dropStale))
	return client, nil
}

// passwords returns every password c holds: its own and any in a URL.
func (c ClientConfig) passwords() []string {
	var pws []string
	if c.Password != "" {
		pws = append(pws, c.Password)
	}
	for _, addr := range c.Addrs {
		if u, err := url.Parse(addr); err == nil && u.User != nil {
			if pw, ok := u.User.Password(); ok && pw != "" {
				pws = append(pws, pw, url.QueryEscape(pw), url.PathEscape(pw))
			}
		} else if err != nil && isURL(addr) {
			// Unparseable: scrub whatever sits between ':' and '@'.
			if at := strings.LastIndex(addr, "@"); at > 0 {
				if colon := strings.LastIndex(addr[:at], ":"); colon >= 0 && colon+1 < at {
					pws = append(pws, addr[colon+1:at])
				}
			}
		}
	}
	return pws
}

// scrub returns err with every password of c replaced, as a last line of
// defence behind messages that never quote one.
func (c ClientConfig) scrub(err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	clean := msg
	for _, pw := range c.passwords() {
		clean = strings.ReplaceAll(clean, pw, redacted)
	}
	if clean == msg {
		return err
	}
	return errors.New(clean)
}

// redactURL returns addr with any password replaced.
func redactURL(addr string) string {
	u, err := url.Parse(addr)
	if err != nil {
		return "(unparseable URL)"
	}
	if _, ok := u.User.Password(); !ok {
		return u.String()
	}
	// URL.Redacted writes "xxxxx"; say what it is as everywhere else.
	return strings.Replace(u.Redacted(), ":xxxxx@", ":"+redacted+"@", 1)
}

// addrs returns the addresses with passwords replaced.
func (c ClientConfig) addrs() []string {
	out := make([]string, len(c.Addrs))
	for i, a := range c.Addrs {
		if isURL(a) {
			a = redactURL(a)
		}
		out[i] = a
	}
	return out
}

// String describes c with the password replaced.
func (c ClientConfig) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "redis %s %s", c.typ(), strings.Join(c.addrs(), ","))
	if c.MasterName != "" {
		fmt.Fprintf(&b, " master=%s", c.MasterName)
	}
	fmt.Fprintf(&b, " db=%d", c.DB)
	if c.Username != "" {
		fmt.Fprintf(&b, " user=%s", c.Username)
	}
	if c.Password != "" {
		b.WriteString(" password=" + redacted)
	}
	if c.usesTLS() {
		b.WriteString(" tls")
	}
	return b.String()
}

// GoString keeps %#v from printing the password.
func (c ClientConfig) GoString() string { return c.String() }

// LogValue implements slog.LogValuer: c's settings, password replaced.
func (c ClientConfig) LogValue() slog.Value {
	attrs := []slog.Attr{
		slog.String("type", c.typ()),
		slog.Any("addrs", c.addrs()),
		slog.Int("db", c.DB),
		slog.Bool("tls", c.usesTLS()),
	}
	if c.MasterName != "" {
		attrs = append(attrs, slog.String("master_name", c.MasterName))
	}
	if c.Username != "" {
		attrs = append(attrs, slog.String("username", c.Username))
	}
	if c.Password != "" {
		attrs = append(attrs, slog.String("password", redacted))
	}
	if c.PoolSize != 0 {
		attrs = append(attrs, slog.Int("pool_size", c.PoolSize))
	}
	return slog.GroupValue(attrs...)
}
