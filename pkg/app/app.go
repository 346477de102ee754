// Package app wires tollgate together: settings, the descriptor reloader,
// the store, the limiter, and the gRPC, HTTP and debug servers.
package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/tollgatehq/tollgate/pkg/admin"
	"github.com/tollgatehq/tollgate/pkg/algorithm"
	"github.com/tollgatehq/tollgate/pkg/audit"
	"github.com/tollgatehq/tollgate/pkg/descriptor"
	"github.com/tollgatehq/tollgate/pkg/fleet"
	"github.com/tollgatehq/tollgate/pkg/httpapi"
	"github.com/tollgatehq/tollgate/pkg/limiter"
	"github.com/tollgatehq/tollgate/pkg/override"
	"github.com/tollgatehq/tollgate/pkg/reload"
	"github.com/tollgatehq/tollgate/pkg/rls"
	"github.com/tollgatehq/tollgate/pkg/store"
	"github.com/tollgatehq/tollgate/pkg/store/breaker"
	"github.com/tollgatehq/tollgate/pkg/store/cached"
	"github.com/tollgatehq/tollgate/pkg/store/memory"
	"github.com/tollgatehq/tollgate/pkg/store/overlimit"
	"github.com/tollgatehq/tollgate/pkg/store/redis"
	"github.com/tollgatehq/tollgate/pkg/telemetry"
	"github.com/tollgatehq/tollgate/pkg/tlsfiles"
	"github.com/tollgatehq/tollgate/pkg/version"
	"github.com/tollgatehq/tollgate/pkg/xds"
)

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
	http    *http.Server
	debug   *http.Server

	// breaker guards the Redis store; nil with the memory store.
	breaker *breaker.Store
	// redis is the Redis store behind breaker; nil with the memory store.
	redis *redis.Store
	// cached decides the hits of cached limits from leases, in front of
	// the Redis chain; nil with the memory store.
	cached *cached.Store
	// cachedNoted is set once the log has said that precision cached
	// changes nothing with the memory store.
	cachedNoted atomic.Bool
	// overlimit is the over-limit cache in the Redis chain; nil without.
	overlimit *overlimit.Store
	// redisClient reaches the Redis store's servers; nil with the memory
	// store.
	redisClient goredis.UniversalClient

	// overrides keeps the operators' live overrides (overrides.go).
	overrides *override.Registry
	// fleet tells the other instances of override changes and resets;
	// nil with the memory store.
	fleet *fleet.Bus
	// events forgets local state when rules, overrides or counters
	// change, here or on other instances (overrides.go).
	events *fleet.Handler

	// audit records admin changes and reloads; auditedTree is the tree
	// the audit last saw, which only treeChanged touches after build.
	audit       *audit.Log
	auditedTree *descriptor.Tree
	// tokens authenticate the admin API; it is off unless they are
	// Enabled.
	tokens *admin.Tokens

	// reload forces a reload of the rules on every receive (the CLI
	// sends one per SIGHUP); nil forces none.
	reload <-chan struct{}

	grpcLis, httpLis, debugLis net.Listener
	// closers release the store's resources after the servers stop, last
	// acquired first.
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
	treeOpts, err := s.descriptorOptions()
	if err != nil {
		return err
	}
	style, err := limiter.ParseHeaderStyle(s.Answers.Headers)
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
	st, err := a.newStore(meters)
	if err != nil {
		return err
	}
	a.noteCachedOnMemory(a.reloader.Current())
	if err := a.newOverrides(ctx, meters); err != nil {
		return err
	}

	opts := limiter.Options{
		Store:              st,
		Tree:               a.reloader.Current,
		Overrides:          a.overrides.Current,
		OnReset:            a.events.Reset,
		HeaderStyle:        style,
		ShadowMode:         s.Rules.ShadowMode,
		DefaultAlgorithm:   treeOpts.DefaultAlgorithm,
		DefaultCharge:      treeOpts.DefaultCharge,
		DefaultFailureMode: treeOpts.DefaultFailureMode,
		MaxDescriptors:     s.Limits.MaxDescriptors,
		MaxEntries:         s.Limits.MaxEntries,
		MaxKeyLen:          s.Limits.MaxKeyLen,
		MaxValueLen:        s.Limits.MaxValueLen,
		MaxHits:            uint64(s.Limits.MaxHits),
		Logger:             a.logger,
		MeterProvider:      meters,
		TracerProvider:     tracer,
	}
	if a.breaker != nil {
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
	}
	if s.GRPCTLS.Cert != "" {
		files, err := tlsfiles.New(tlsfiles.Options{
			CertFile: s.GRPCTLS.Cert, KeyFile: s.GRPCTLS.Key, ClientCAFile: s.GRPCTLS.ClientCA, ClientSAN: s.GRPCTLS.ClientSAN,
			Logger: a.logger.With("component", "grpc-tls"),
		})
		if err != nil {
			return fmt.Errorf("gRPC TLS: %w", err)
		}
		grpcOpts = append(grpcOpts, grpc.Creds(credentials.NewTLS(files.TLSConfig())))
		a.logger.Info("serving gRPC over TLS", "cert", s.GRPCTLS.Cert, "serial", files.Leaf().SerialNumber.Text(16),
			"client_ca", s.GRPCTLS.ClientCA, "client_san", s.GRPCTLS.ClientSAN)
	}
	a.grpc = grpc.NewServer(grpcOpts...)
	a.rls.Register(a.grpc)

	adminAPI, err := a.newAdminAPI()
	if err != nil {
		return err
	}
	a.http = &http.Server{
		Handler: httpapi.New(httpapi.Options{
			Limiter:     lim,
			JSON:        a.rls.JSONHandler(),
			Metrics:     a.telemetry.Handler(),
			Ready:       a.ready,
			Degraded:    a.degraded,
			Admin:       adminAPI,
			MaxBodySize: 1 << 20,
			Logger:      a.logger,
		}),
		ReadHeaderTimeout: 5 * time.Second,
	}
	if s.Listen.Debug != "" {
		a.debug = &http.Server{Handler: a.debugHandler(), ReadHeaderTimeout: 5 * time.Second}
	}

	if a.grpcLis, err = net.Listen("tcp", s.Listen.GRPC); err != nil {
		return fmt.Errorf("listening for gRPC: %w", err)
	}
	if a.httpLis, err = net.Listen("tcp", s.Listen.HTTP); err != nil {
		return fmt.Errorf("listening for HTTP: %w", err)
	}
	if a.debug != nil {
		if a.debugLis, err = net.Listen("tcp", s.Listen.Debug); err != nil {
			return fmt.Errorf("listening for debug: %w", err)
		}
	}
	return nil
}

// newStore builds the store the settings choose; the one switch over
// backends.
func (a *App) newStore(meters metric.MeterProvider) (store.Store, error) {
	s := a.settings
	switch s.Store {
	case "memory":
		return memory.New(memory.Options{MaxKeys: s.Limits.MemoryMaxKeys}), nil
	case "redis":
		cfg, err := s.Redis.clientConfig()
		if err != nil {
			return nil, err
		}
		client, err := redis.NewClient(cfg)
		if err != nil {
			return nil, fmt.Errorf("creating the redis client: %w", err)
		}
		a.closers = append(a.closers, client.Close)
		a.redisClient = client
		st, err := redis.New(redis.Options{
			Client:        client,
			KeyPrefix:     s.Redis.KeyPrefix,
			BatchWindow:   s.Redis.BatchWindow,
			Logger:        a.logger,
			MeterProvider: meters,
		})
		if err != nil {
			return nil, fmt.Errorf("creating the redis store: %w", err)
		}
		a.closers = append(a.closers, st.Close)
		a.redis = st
		a.breaker, err = breaker.New(st, breaker.Options{
			Name:          "redis",
			Failures:      uint32(s.Failure.BreakerFailures),
			OpenFor:       s.Failure.BreakerOpenTime,
			Probes:        uint32(s.Failure.BreakerProbes),
			OnChange:      a.storeChanged,
			Logger:        a.logger,
			MeterProvider: meters,
		})
		if err != nil {
			return nil, err
		}
		a.logger.Info("counting in redis", "redis", cfg)
		var chain store.Store = a.breaker
		if s.Redis.OverLimitCacheBytes != 0 {
			// Above the breaker, so that counters known to be over their
			// limit are still answered while Redis is away.
			if a.overlimit, err = overlimit.New(a.breaker, overlimit.Options{MaxBytes: s.Redis.OverLimitCacheBytes, MeterProvider: meters}); err != nil {
				return nil, err
			}
			chain = a.overlimit
		}
		// In front of everything: hits of strict limits pass through to
		// the chain, while leases bypass the over-limit cache (the cached
		// store keeps its own) but go through the breaker, so that Redis
		// failing while leases renew opens it too. Built whatever
		// --precision says, since a reload may ask for cached.
		a.cached = cached.New(cached.Options{
			Inner:         chain,
			Leaser:        a.breaker,
			RenewInterval: s.Leases.Interval,
			Lifetime:      s.Leases.Lifetime,
			MeterProvider: meters,
			Logger:        a.logger,
		})
		// Appended after the Redis store's Close, so it runs before it:
		// the unspent hits of every lease go back while Redis is there.
		a.closers = append(a.closers, func() error {
			ctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
			defer cancel()
			if err := a.cached.Close(ctx); err != nil {
				return fmt.Errorf("returning leases: %w", err)
			}
			return nil
		})
		return a.cached, nil
	}
	return nil, fmt.Errorf("unknown store %q", s.Store)
}

// treeChanged is the reloader's OnChange. New rules make the gRPC health
// SERVING (it starts NOT_SERVING while rules over xDS have not come yet).
// After a reload swaps in a new tree, the cached store forgets every counter and returns every lease,
// since a lease was sized and charged under the old rules (a smaller limit
// must not be spent from a lease taken under a larger one). Counters whose
// rules did not change lease again on their next hit: one round trip
// each, the price of a simple rule that is always right. A request that
// matched the old tree before the swap may still take a lease under it
// after the Reset; such a lease is at most 1/64 of what was left and ends
// with its window or lifetime.
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
	if a.settings.Store != "memory" || !tree.Cached() || !a.cachedNoted.CompareAndSwap(false, true) {
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
func (a *App) degraded() string {
	if a.breaker == nil {
		return ""
	}
	if st := a.breaker.State(); st != breaker.Closed {
		why := "store unavailable"
		if err := a.redis.ServerError(); err != nil {
			why = err.Error()
		}
		return why + ", circuit breaker " + st.String() + "; answering by failure modes"
	}
	return ""
}

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

// Addrs returns the bound gRPC, HTTP and debug addresses ("" when the debug
// server is disabled).
func (a *App) Addrs() (grpcAddr, httpAddr, debugAddr string) {
	if a.debugLis != nil {
		debugAddr = a.debugLis.Addr().String()
	}
	return a.grpcLis.Addr().String(), a.httpLis.Addr().String(), debugAddr
}

// Run serves until ctx ends or a server fails, then shuts down gracefully:
// health turns NOT_SERVING, in-flight calls get shutdownGrace to finish.
func (a *App) Run(ctx context.Context) error {
	defer a.close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	var wg sync.WaitGroup
	errs := make(chan error, 5)
	serve := func(name string, fn func() error) {
		wg.Go(func() {
			if err := fn(); err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, grpc.ErrServerStopped) {
				errs <- fmt.Errorf("%s server: %w", name, err)
				cancel()
			}
		})
	}
	serve("gRPC", func() error { return a.grpc.Serve(a.grpcLis) })
	serve("HTTP", func() error { return a.http.Serve(a.httpLis) })
	if a.debug != nil {
		serve("debug", func() error { return a.debug.Serve(a.debugLis) })
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
	if a.breaker != nil {
		wg.Go(func() { a.probeStore(ctx) })
	}
	a.runOverrides(ctx, &wg)

	grpcAddr, httpAddr, debugAddr := a.Addrs()
	a.logger.Info("tollgate serving", "version", a.buildInfo.Version, "grpc", grpcAddr, "http", httpAddr, "debug", debugAddr,
		"store", a.settings.Store, "config_type", a.settings.XDS.ConfigType, "config_dir", a.settings.ConfigDir, "config_hash", a.reloader.Status().Hash,
		"tracing", a.telemetry.Tracing())

	<-ctx.Done()
	a.shutdown()
	wg.Wait()
	close(errs)
	return errors.Join(collect(errs)...)
}

// probeStore asks the store for a decision every breaker open time while
// its breaker is not closed, until ctx ends. Without it an open breaker
// closes only through traffic, which an instance that health checks took
// out of rotation (--breaker-not-serving) never gets back.
func (a *App) probeStore(ctx context.Context) {
	// A check (cost 0) of a counter no rule uses: it writes nothing.
	hits := []store.Hit{{
		Domain:  "tollgate.probe",
		Entries: []store.Entry{{Key: "probe", Value: "probe"}},
		Shard:   "probe",
		Limit:   algorithm.Limit{Kind: algorithm.TokenBucket, Requests: 1, Period: time.Second.Microseconds()},
	}}
	verdicts := make([]algorithm.Verdict, len(hits))
	tick := time.NewTicker(a.settings.Failure.BreakerOpenTime)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if a.breaker.State() == breaker.Closed {
			continue
		}
		pctx, cancel := context.WithTimeout(ctx, a.settings.Failure.StoreTimeout)
		_ = a.breaker.Apply(pctx, hits, verdicts) // the breaker records the outcome
		cancel()
	}
}

// forceReloads turns every receive from the reload channel into a forced
// reload until ctx ends.
func (a *App) forceReloads(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-a.reload:
			a.reloader.Trigger()
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
	_ = a.http.Shutdown(ctx)
	if a.debug != nil {
		_ = a.debug.Shutdown(ctx)
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
	for _, l := range []net.Listener{a.grpcLis, a.httpLis, a.debugLis} {
		if l != nil {
			_ = l.Close()
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
