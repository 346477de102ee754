package admin

import (
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/tollgatehq/tollgate/pkg/algorithm"
)

// refusalLimit is what one remote address may spend on refused calls: a
// burst of 10, then one every 6 seconds. Once it is spent, the address's
// calls are answered 429 without their token being looked at, so guessing
// tokens costs a guesser a minute per ten guesses.
var refusalLimit = algorithm.Limit{Kind: algorithm.TokenBucket, Requests: 10, Period: time.Minute.Microseconds()}

// maxThrottled bounds how many remote addresses the throttle remembers.
// Beyond it, addresses whose refusals have all refilled are forgotten, and
// if that is not enough, all are.
const maxThrottled = 10_000

// throttle counts refused calls per remote address, in a token bucket each.
type throttle struct {
	mu    sync.Mutex
	state map[string]algorithm.State
}

// remoteHost is the address a call came from, without its port.
func remoteHost(r *http.Request) string {
	if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		return host
	}
	return r.RemoteAddr
}

// wait returns how long host must wait before its calls are looked at
// again: zero while it has refusals left.
func (t *throttle) wait(host string, now time.Time) time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	_, v := algorithm.Apply(refusalLimit, t.state[host], algorithm.Micros(now), 1)
	return v.RetryAfter
}

// refused spends one of host's refusals.
func (t *throttle) refused(host string, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	us := algorithm.Micros(now)
	if _, known := t.state[host]; !known && len(t.state) >= maxThrottled {
		for h, s := range t.state {
			if refusalLimit.Expiry(s) <= us {
				delete(t.state, h)
			}
		}
		if len(t.state) >= maxThrottled {
			clear(t.state)
		}
	}
	if t.state == nil {
		t.state = make(map[string]algorithm.State)
	}
	s, v := algorithm.Apply(refusalLimit, t.state[host], us, 1)
	if v.Allowed {
		t.state[host] = s
	}
}
