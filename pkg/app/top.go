package app

import (
	"crypto/rand"
	"encoding/hex"
	"os"

	"github.com/tollgatehq/tollgate/pkg/descriptor"
	"github.com/tollgatehq/tollgate/pkg/limiter"
	"github.com/tollgatehq/tollgate/pkg/top"
	topredis "github.com/tollgatehq/tollgate/pkg/top/redis"
)

// newTop builds the heavy-hitter summaries when --top-capacity is not 0:
// the recorder, and with Redis the fleet that shares every instance's.
// It needs the store chain built.
func (a *App) newTop() error {
	s := a.settings.Top
	if s.Capacity == 0 {
		return nil
	}
	name := instanceName()
	opts := top.Options{Capacity: s.Capacity, Instance: name, Logger: a.logger}
	if a.store.Remote() {
		f, err := topredis.New(topredis.Options{Client: a.store.client, KeyPrefix: a.settings.Redis.KeyPrefix,
			Instance: name, Interval: s.Publish, Logger: a.logger})
		if err != nil {
			return err
		}
		a.topFleet, opts.Peers = f, f
	}
	rec, err := top.New(opts)
	if err != nil {
		return err
	}
	a.top = rec
	return nil
}

// instanceName names this instance in the fleet's summaries: the host's
// name and a random suffix, so that two processes on one host differ.
func instanceName() string {
	host, _ := os.Hostname()
	var b [4]byte
	_, _ = rand.Read(b[:])
	if host == "" {
		return hex.EncodeToString(b[:])
	}
	return host + "-" + hex.EncodeToString(b[:])
}

// Top returns the heavy-hitter summaries of every rule, merged across
// the fleet with the Redis store, for the admin API; nil while
// --top-capacity is 0.
func (a *App) Top() *top.Recorder { return a.top }

// topObserver lets the limiter tell the summaries about every decision.
type topObserver struct{ rec *top.Recorder }

var _ limiter.Observer = topObserver{}

func (o topObserver) Rule(domain, rule, limit string, lim *descriptor.Limit) limiter.RuleObserver {
	return o.rec.Rule(domain, rule, limit, lim)
}
