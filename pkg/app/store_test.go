package app_test

import (
	"testing"

	"github.com/tollgatehq/tollgate/internal/apptest"
	"github.com/tollgatehq/tollgate/internal/redistest"
	"github.com/tollgatehq/tollgate/pkg/app"
)

// TestStoreChainLeaser checks that the store chain exposes a leaser, the
// breaker in front of Redis, only where leases can be had.
func TestStoreChainLeaser(t *testing.T) {
	if l := apptest.Start(t, "../../config-examples", apptest.Options{}).Leaser(); l != nil {
		t.Errorf("the memory store's leaser is %T, want none", l)
	}
	srv := redistest.StartStandalone(t)
	a := apptest.Start(t, "../../config-examples", apptest.Options{Settings: func(s *app.Settings) {
		s.Store, s.Redis.Addrs = "redis", []string{srv.Addr}
	}})
	if a.Leaser() == nil {
		t.Error("the redis chain has no leaser")
	}
}
