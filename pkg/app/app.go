// Package app wires tollgate together: settings, the descriptor reloader,
// the store, the limiter, and the gRPC, HTTP, admin and debug servers.
package app

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"

	"github.com/tollgatehq/tollgate/pkg/admin"
	"github.com/tollgatehq/tollgate/pkg/audit"
	"github.com/tollgatehq/tollgate/pkg/descriptor"
	"github.com/tollgatehq/tollgate/pkg/fleet"
	"github.com/tollgatehq/tollgate/pkg/httpapi"
	"github.com/tollgatehq/tollgate/pkg/limiter"
	"github.com/tollgatehq/tollgate/pkg/override"
	"github.com/tollgatehq/tollgate/pkg/record"
	"github.com/tollgatehq/tollgate/pkg/reload"
	"github.com/tollgatehq/tollgate/pkg/rls"
	"github.com/tollgatehq/tollgate/pkg/shadow"
	"github.com/tollgatehq/tollgate/pkg/store/breaker"
	"github.com/tollgatehq/tollgate/pkg/store/memory"
	"github.com/tollgatehq/tollgate/pkg/telemetry"
	"github.com/tollgatehq/tollgate/pkg/tlsfiles"
	"github.com/tollgatehq/tollgate/pkg/top"
	topredis "github.com/tollgatehq/tollgate/pkg/top/redis"
	"github.com/tollgatehq/tollgate/pkg/version"
	"github.com/tollgatehq/tollgate/pkg/xds"
)

// meterName is the instrumentation scope of the app's own metrics.
const meterName = "github.com/tollgatehq/tollgate/pkg/app"

// shutdownGrace bounds how long in-flight calls may take after a stop.
const shutdownGrace = 5 * time.Second

// streamWorkers is the number of goroutines kept to serve gRPC calls.
const streamWorkers = 256

// App is a running tollgate: its listeners are bound by New, and Run serves
// on them until its context ends.
type App struct {
	settings  Settings
	buildInfo version.Info
	logger    *slog.Logger
	telemetry *telemetry.Telemetry
	reloader  *reload.Reloader
	// xds feeds reloader with --config-type xds; nil with files.
	xds *xds.Client
	rls *rls.Server
	// limiter decides, and resets counters (Limiter.Reset).
	limiter *limiter.Limiter
	grpc    *grpc.Server
	// http serves the check, health and metrics; admin the admin API
	// (nil while it is off); debug pprof and /debug/config (nil when
	// disabled).
	http, admin, debug *httpServer

	// store counts: the memory store or the Redis chain (store.go).
	store *storeChain
	// cachedNoted is set once the log has said that precision cached
	// changes nothing with the memory store.
	cachedNoted atomic.Bool

	// overrides keeps the operators' live overrides (overrides.go).
	overrides *override.Registry
	// fleet tells the other instances of override changes and resets;
	// nil with the memory store.
	fleet *fleet.Bus
	// events forgets local state when rules, overrides or counters
	// change, here or on other instances (overrides.go).
	events *fleet.Handler

	// top keeps the heavy-hitter summaries (top.go), nil while they are
	// off; topFleet shares them through Redis, nil with the memory store.
	top      *top.Recorder
	topFleet *topredis.Fleet
	// recorder records decided calls (record.go), nil without
	// --record-file.
	recorder *record.Recorder
	// shadow decides every decided call again under the shadow rules,
	// which shadowRules keeps, and shadowTop keeps their top clients
	// (shadow.go); all nil without --shadow-config-dir, shadowTop while
	// the live top clients are off too.
	shadow      *shadow.Set
	shadowRules *reload.Reloader
	shadowTop   *top.Recorder

	// audit records admin changes and reloads; auditedTree is the tree
	// the audit last saw, which only treeChanged touches after build.
	audit       *audit.Log
	auditedTree *descriptor.Tree
	// auditFile is the audit log's file (--audit-log), reopened with every
	// forced reload; nil when the audit goes to stderr.
	auditFile *audit.File
	// tokens authenticate the admin API; it is off unless they are
	// Enabled.
	tokens *admin.Tokens

	// reload forces a reload of the rules on every receive (the CLI
	// sends one per SIGHUP); nil forces none.
	reload <-chan struct{}

	grpcLis net.Listener
	// closers release what New acquired besides the store (the audit
	// log's file), last acquired first, after the store closes.
	closers []func() error
}

// New loads the configuration, builds every component and binds the
// listeners. It fails if the descriptor configuration is invalid. Every
// receive from reload, which may be nil, forces a reload of the rules.
func New(ctx context.Context, s Settings, logger *slog.Logger, reload <-chan struct{}) (*App, error) {
	s.ratelimitEnv.Log(logger)
	a := &App{settings: s, logger: logger, buildInfo: version.Read(), reload: reload}
	if err := a.build(ctx); err != nil {
		a.close()
		return nil, err
	}
	return a, nil
}

func (a *App) build(ctx context.Context) error {
	s := a.settings
	opts, err := s.engineOptions()
	if err != nil {
		return err
	}
	topts := s.Tracing.telemetryOptions()
	topts.ServiceVersion = a.buildInfo.Version
	topts.Build = telemetry.BuildInfo{Version: a.buildInfo.Version, Revision: a.buildInfo.Revision, GoVersion: a.buildInfo.GoVersion}
	if a.telemetry, err = telemetry.Setup(ctx, topts); err != nil {
		return fmt.Errorf("setting up telemetry: %w", err)
	}
	if a.audit, err = a.newAudit(); err != nil {
		return err
	}
	if a.tokens, err = a.newTokens(); err != nil {
		return err
	}
	meters := a.telemetry.MeterProvider()
	if err := a.auditMetrics(meters); err != nil {
		return err
	}
	var tracer trace.TracerProvider // nil while tracing is off: no spans, no cost
	if a.telemetry.Tracing() {
		tracer = a.telemetry.TracerProvider()
	}

	if s.XDS.ConfigType == "xds" {
		a.reloader, a.xds, err = newXDS(s, a.logger, meters, a.treeChanged)
	} else {
		a.reloader, err = newReloader(s, a.logger, meters, a.treeChanged)
	}
	if err != nil {
		return err
	}

	a.auditedTree = a.reloader.Current()
	if a.store, err = newStoreChain(s, a.logger, meters, a.storeChanged); err != nil {
		return err
	}
	a.noteCachedOnMemory(a.reloader.Current())
	if err := a.newOverrides(ctx, meters); err != nil {
		return err
	}
	if err := a.newTop(); err != nil {
		return err
	}
	if err := a.newRecorder(); err != nil {
		return err
	}

	opts.Store, opts.Tree, opts.Overrides, opts.OnReset = a.store.Store(), a.reloader.Current, a.overrides.Current, a.events.Reset
	opts.Logger, opts.MeterProvider, opts.TracerProvider = a.logger, meters, tracer
	if a.top != nil {
		opts.Observer = topObserver{rec: a.top}
	}
	if err := a.newShadow(opts); err != nil {
		return err
	}
	opts.Recorder = a.recorders()
	if a.store.Remote() {
		// Only a remote store waits, fails and needs a fallback.
		opts.StoreTimeout, opts.DeadlineMargin = s.Failure.StoreTimeout, s.Failure.DeadlineMargin
		opts.Fallback = memory.New(memory.Options{MaxKeys: s.Failure.LocalFallbackMaxKeys})
		opts.FallbackShare = s.Failure.LocalFallbackShare
	}
	lim, err := limiter.New(opts)
	if err != nil {
		return err
	}
	a.limiter = lim

	a.rls = rls.New(rls.Options{
		Limiter: lim, Logger: a.logger, TracerProvider: tracer,
		ResponseDynamicMetadata: s.Answers.DynamicMetadata, OmitDecisionMetadata: !s.Answers.DecisionMetadata,
		UntrustedGRPC: !s.Trust.trusts("grpc"), UntrustedJSON: !s.Trust.trusts("http"),
		TrustCaller: trustCertified(s.Trust.sans()),
	})
	if a.reloader.Current() == nil {
		// Rules over xDS come after the start: until they do, Envoy's
		// health checks must not send calls that no rule would decide.
		a.rls.SetServing(false)
	}
	grpcOpts := []grpc.ServerOption{
		// Serve calls on long-lived workers rather than a goroutine per
		// call: a fresh goroutine grows its stack on every call, which
		// profiles showed as a tenth of the service's CPU. A worker waits
		// on the store, so there are as many as calls commonly in flight;
		// beyond them grpc starts goroutines as before.
		grpc.NumStreamWorkers(streamWorkers),
		// Encodes the answers' dynamic metadata without reflection.
		grpc.ForceServerCodecV2(rls.Codec()),
	}
	grpcOpts = append(grpcOpts, s.Conns.grpcOptions()...)
	if s.GRPCTLS.Cert != "" {
		cfg, err := a.serverTLS(serverTLS(s.GRPCTLS), "gRPC")
		if err != nil {
			return err
		}
		grpcOpts = append(grpcOpts, grpc.Creds(credentials.NewTLS(cfg)))
	}
	a.grpc = grpc.NewServer(grpcOpts...)
	a.rls.Register(a.grpc)
	if a.grpcLis, err = net.Listen("tcp", s.Listen.GRPC); err != nil {
		return fmt.Errorf("listening for gRPC: %w", err)
	}

	adminAPI, err := a.newAdminAPI()
	if err != nil {
		return err
	}
	public := httpapi.Options{
		Limiter:     lim,
		JSON:        a.rls.JSONHandler(),
		Metrics:     a.telemetry.Handler(),
		Ready:       a.ready,
		Degraded:    a.degraded,
		MaxBodySize: 1 << 20,
		Logger:      a.logger,
		Untrusted:   !s.Trust.trusts("http"),
	}
	if adminAPI != nil {
		public.AdminRoutes = adminAPI.Routes()
	}
	if a.http, err = a.listen("HTTP", s.Listen.HTTP, httpapi.New(public)); err != nil {
		return err
	}
	a.http.lis = s.Conns.httpListener(a.http.lis)
	if adminAPI != nil {
		// No cap on connections, as for the debug server: the admin
		// listener is not the public one, and an operator must reach it
		// most when the public listener is full.
		if a.admin, err = a.listen("admin", s.Listen.Admin, adminAPI); err != nil {
			return err
		}
		if s.AdminTLS.Cert != "" {
			cfg, err := a.serverTLS(serverTLS(s.AdminTLS), "admin")
			if err != nil {
				return err
			}
			a.admin.lis = tls.NewListener(a.admin.lis, cfg)
		}
	}
	if s.Listen.Debug != "" {
		// The HTTP server's timeouts, which a profile outlives: a CPU
		// profile or an execution trace streams for as many seconds as
		// its caller asks, and net/http/pprof moves the write deadline
		// on by that many; a request without a body has no read deadline
		// once its handler runs. No cap on connections: the operators
		// must reach pprof most when the HTTP listener is full.
		if a.debug, err = a.listen("debug", s.Listen.Debug, a.debugHandler()); err != nil {
			return err
		}
	}
	return nil
}

// httpServer is one of the App's HTTP servers and the listener it
// serves on.
type httpServer struct {
	name string
	srv  *http.Server
	lis  net.Listener
}

// listen binds addr for an HTTP server of handler, with the settings'
// timeouts.
func (a *App) listen(name, addr string, handler http.Handler) (*httpServer, error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listening for %s: %w", name, err)
	}
	srv := a.settings.Conns.httpServer(handler)
	// The server's own errors: failed TLS handshakes, a handler's panic.
	srv.ErrorLog = slog.NewLogLogger(a.logger.With("component", strings.ToLower(name)).Handler(), slog.LevelWarn)
	return &httpServer{name: name, srv: srv, lis: lis}, nil
}

// httpServers returns the App's HTTP servers that are on.
func (a *App) httpServers() []*httpServer {
	var on []*httpServer
	for _, s := range []*httpServer{a.http, a.admin, a.debug} {
		if s != nil {
			on = append(on, s)
		}
	}
	return on
}

// serverTLS returns the TLS configuration of server's settings t, which
// re-reads the files when they change, and logs it.
func (a *App) serverTLS(t serverTLS, server string) (*tls.Config, error) {
	files, err := tlsfiles.New(tlsfiles.Options{
		CertFile: t.Cert, KeyFile: t.Key, ClientCAFile: t.ClientCA, ClientSAN: t.ClientSAN,
		Logger: a.logger.With("component", strings.ToLower(server)+"-tls"),
	})
	if err != nil {
		return nil, fmt.Errorf("%s TLS: %w", server, err)
	}
	a.logger.Info("serving "+server+" over TLS", "cert", t.Cert, "serial", files.Leaf().SerialNumber.Text(16),
		"client_ca", t.ClientCA, "client_san", t.ClientSAN)
	return files.TLSConfig(), nil
}

// trustCertified returns the rls.Options.TrustCaller that trusts a gRPC
// caller whose verified client certificate carries one of sans, or nil
// without sans.
func trustCertified(sans []string) func(context.Context) bool {
	if len(sans) == 0 {
		return nil
	}
	return func(ctx context.Context) bool {
		p, ok := peer.FromContext(ctx)
		if !ok {
			return false
		}
		info, ok := p.AuthInfo.(credentials.TLSInfo)
		if !ok || len(info.State.VerifiedChains) == 0 {
			return false
		}
		leaf := info.State.VerifiedChains[0][0]
		return slices.ContainsFunc(sans, func(san string) bool { return tlsfiles.HasSAN(leaf, san) })
	}
}

// treeChanged is the reloader's OnChange. New rules make the gRPC health
// SERVING (it starts NOT_SERVING while rules over xDS have not come yet),
// are audited, and end every lease through the fleet's handler
// (fleet.Handler.RulesChanged), since a lease was sized and charged under
// the old rules: a smaller limit must not be spent from a lease taken
// under a larger one. A request that matched the old tree before the swap
// may still take a lease under it after the reset; such a lease is at
// most 1/64 of what was left and ends with its window or lifetime.
func (a *App) treeChanged(tree *descriptor.Tree) {
	if a.rls != nil {
		// Rules are live (over xDS the first may come late): serve,
		// unless the breaker says otherwise.
		a.rls.SetServing(!a.settings.Failure.BreakerNotServing || a.degraded() == "")
	}
	a.auditReload(tree)
	if a.events != nil {
		a.events.RulesChanged()
	}
	a.noteCachedOnMemory(tree)
}

// noteCachedOnMemory says once, in the log, that precision cached has no
// effect with the memory store, where every decision is local already.
func (a *App) noteCachedOnMemory(tree *descriptor.Tree) {
	if a.store == nil || a.store.Remote() || !tree.Cached() || !a.cachedNoted.CompareAndSwap(false, true) {
		return
	}
	a.logger.Info("precision cached has no effect with the memory store: every decision is local already")
}

// ready reports whether the service can answer: it has a live tree, and
// the store's breaker is not open if that is to count as not serving.
func (a *App) ready() error {
	if a.reloader.Current() == nil {
		return errors.New("no descriptor configuration loaded")
	}
	if why := a.degraded(); why != "" && a.settings.Failure.BreakerNotServing {
		return errors.New(why)
	}
	return nil
}

// degraded returns why decisions are made without the store, or "".
func (a *App) degraded() string { return a.store.Degraded() }

// storeChanged reports a change of the store breaker's state in the gRPC
// health: the store's own health service always, the server's when the
// settings ask for it. A half-open breaker changes nothing, so health
// moves once per outage and once per recovery.
func (a *App) storeChanged(st breaker.State) {
	if st == breaker.HalfOpen {
		return
	}
	a.rls.SetStoreHealthy(st == breaker.Closed)
	if a.settings.Failure.BreakerNotServing {
		a.rls.SetServing(st == breaker.Closed && a.reloader.Current() != nil)
	}
}

func (a *App) debugHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /debug/config", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		st := a.reloader.Status()
		// The hash comes first: the README's `head -1` shows a reload.
		fmt.Fprintf(w, "# hash %s, loaded %s\n", st.Hash, st.LastSuccess.Format(time.RFC3339))
		fmt.Fprintf(w, "# tollgate %s, revision %s, %s\n", a.buildInfo.Version, a.buildInfo.Revision, a.buildInfo.GoVersion)
		if st.LastError != nil {
			fmt.Fprintf(w, "# last reload failed, previous configuration kept:\n# %v\n", st.LastError)
		}
		_, _ = io.WriteString(w, a.reloader.Current().String())
		a.writeOverrides(w)
	})
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}

// Addrs are the addresses an App listens on.
type Addrs struct {
	GRPC, HTTP string
	// Admin is "" while the admin API is off, Debug when the debug
	// server is disabled.
	Admin, Debug string
}

// Addrs returns the bound addresses.
func (a *App) Addrs() Addrs {
	addrs := Addrs{GRPC: a.grpcLis.Addr().String(), HTTP: a.http.lis.Addr().String()}
	if a.admin != nil {
		addrs.Admin = a.admin.lis.Addr().String()
	}
	if a.debug != nil {
		addrs.Debug = a.debug.lis.Addr().String()
	}
	return addrs
}

// Run serves until ctx ends or a server fails, then shuts down gracefully:
// health turns NOT_SERVING, in-flight calls get shutdownGrace to finish.
func (a *App) Run(ctx context.Context) error {
	defer a.close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	var wg sync.WaitGroup
	errs := make(chan error, 6)
	serve := func(name string, fn func() error) {
		wg.Go(func() {
			if err := fn(); err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, grpc.ErrServerStopped) {
				errs <- fmt.Errorf("%s server: %w", name, err)
				cancel()
			}
		})
	}
	serve("gRPC", func() error { return a.grpc.Serve(a.grpcLis) })
	for _, s := range a.httpServers() {
		serve(s.name, func() error { return s.srv.Serve(s.lis) })
	}
	wg.Go(func() {
		if err := a.reloader.Run(ctx); err != nil {
			errs <- fmt.Errorf("config watcher: %w", err)
			cancel()
		}
	})
	if a.xds != nil {
		wg.Go(func() { _ = a.xds.Run(ctx) }) // returns when ctx ends
	}
	wg.Go(func() {
		if err := a.tokens.Run(ctx); err != nil {
			errs <- err
			cancel()
		}
	})
	if a.reload != nil {
		wg.Go(func() { a.forceReloads(ctx) })
	}
	wg.Go(func() { a.store.probe(ctx, a.settings.Failure.BreakerOpenTime, a.settings.Failure.StoreTimeout) })
	a.runOverrides(ctx, &wg)
	if a.topFleet != nil {
		wg.Go(func() { a.topFleet.Run(ctx, a.top) })
	}
	if a.shadow != nil {
		wg.Go(func() { a.runShadow(ctx) })
	}

	addrs := a.Addrs()
	a.logger.Info("tollgate serving", "version", a.buildInfo.Version, "grpc", addrs.GRPC, "http", addrs.HTTP, "admin", addrs.Admin, "debug", addrs.Debug,
		"store", a.settings.Store, "config_type", a.settings.XDS.ConfigType, "config_dir", a.settings.ConfigDir, "config_hash", a.reloader.Status().Hash,
		"tracing", a.telemetry.Tracing())

	<-ctx.Done()
	a.shutdown()
	wg.Wait()
	close(errs)
	return errors.Join(collect(errs)...)
}

// forceReloads turns every receive from the reload channel into a forced
// reload of the rules (and of the shadow rules), and opens the audit file
// again (after a log rotation), until ctx ends.
func (a *App) forceReloads(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-a.reload:
			a.reloader.Trigger()
			if a.shadowRules != nil {
				a.shadowRules.Trigger()
			}
			if a.auditFile == nil {
				continue
			}
			if err := a.auditFile.Reopen(); err != nil {
				a.logger.Warn("reopening the audit log; entries go to the file open before", "error", err)
			}
		}
	}
}

func (a *App) shutdown() {
	a.logger.Info("shutting down", "grace", shutdownGrace)
	// NOT_SERVING for good: a later breaker change cannot undo it.
	a.rls.Health().Shutdown()
	ctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()

	stopped := make(chan struct{})
	go func() { a.grpc.GracefulStop(); close(stopped) }()
	for _, s := range a.httpServers() {
		_ = s.srv.Shutdown(ctx)
	}
	select {
	case <-stopped:
	case <-ctx.Done():
		a.logger.Warn("in-flight gRPC calls did not finish in time; closing them")
		a.grpc.Stop()
		<-stopped
	}
}

// close releases what New acquired; it is safe on a partly built App.
func (a *App) close() {
	if a.grpcLis != nil {
		_ = a.grpcLis.Close()
	}
	for _, s := range a.httpServers() {
		_ = s.lis.Close()
	}
	if a.store != nil {
		for _, err := range a.store.Close() {
			a.logger.Warn("closing the store", "error", err)
		}
	}
	for i := len(a.closers) - 1; i >= 0; i-- {
		if err := a.closers[i](); err != nil {
			a.logger.Warn("closing the store", "error", err)
		}
	}
	a.closers = nil
	if a.telemetry != nil {
		// Flushes pending spans; bounded, since the receiver may be gone.
		ctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
		defer cancel()
		if err := a.telemetry.Shutdown(ctx); err != nil {
			a.logger.Warn("flushing telemetry", "error", err)
		}
	}
}

func collect(errs <-chan error) []error {
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	return all
}
