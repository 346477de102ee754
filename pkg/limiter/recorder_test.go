package limiter_test

import (
	"context"
	"fmt"
	"testing"
	"testing/fstest"
	"time"

	"github.com/tollgatehq/tollgate/pkg/descriptor"
	"github.com/tollgatehq/tollgate/pkg/limiter"
	"github.com/tollgatehq/tollgate/pkg/store/memory"
)

// heard keeps the domain and overall code of every request it hears.
type heard struct{ calls []string }

func (h *heard) Record(_ time.Time, _ *descriptor.Domain, req *limiter.Request, resp *limiter.Response) {
	h.calls = append(h.calls, req.Domain+" "+resp.Code.String())
}

func TestRecorders(t *testing.T) {
	if limiter.Recorders() != nil || limiter.Recorders(nil, nil) != nil {
		t.Fatal("Recorders of none is not nil")
	}
	one := &heard{}
	if got := limiter.Recorders(nil, one); got != one {
		t.Fatalf("Recorders of one = %v, want that one itself", got)
	}

	tree, err := descriptor.LoadFS(fstest.MapFS{"api.yaml": {Data: []byte(`
domain: api
descriptors:
  - key: k
    rate_limit: {unit: hour, requests_per_unit: 1}
`)}}, descriptor.Options{})
	if err != nil {
		t.Fatal(err)
	}
	a, b := &heard{}, &heard{}
	lim, err := limiter.New(limiter.Options{Store: memory.New(memory.Options{}), Tree: func() *descriptor.Tree { return tree },
		Recorder: limiter.Recorders(a, nil, b)})
	if err != nil {
		t.Fatal(err)
	}
	req := &limiter.Request{Domain: "api", Descriptors: []limiter.Descriptor{{Entries: []descriptor.Entry{{Key: "k", Value: "v"}}}}}
	for range 2 {
		if _, err := lim.Check(context.Background(), req); err != nil {
			t.Fatal(err)
		}
	}
	want := "[api OK api OVER_LIMIT]"
	for name, h := range map[string]*heard{"first": a, "second": b} {
		if got := fmt.Sprint(h.calls); got != want {
			t.Errorf("the %s recorder heard %s, want %s", name, got, want)
		}
	}
}
