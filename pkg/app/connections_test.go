package app_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/stats"

	"github.com/tollgatehq/tollgate/internal/apptest"
	"github.com/tollgatehq/tollgate/internal/polltest"
	"github.com/tollgatehq/tollgate/pkg/app"
)

// The bounds on what one client may hold of the servers
// (app.ConnectionSettings), each tried by a client that behaves as an
// attacker's would, on loopback.

const rulesDir = "../../config-examples"

// TestHTTPTrickledBody sends a request body one byte at a time, to
// /v1/check and to the debug server, and holds each server to the read
// timeout: the connection is closed once the timeout passes, however
// steadily the bytes come.
func TestHTTPTrickledBody(t *testing.T) {
	const readTimeout = 300 * time.Millisecond
	a := apptest.Start(t, rulesDir, apptest.Options{Settings: func(s *app.Settings) { s.Conns.HTTPReadTimeout = readTimeout }})
	for _, tt := range []struct{ name, addr, path string }{
		{"check", a.HTTPAddr, "/v1/check"},
		{"debug", a.DebugAddr, "/debug/pprof/symbol"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			conn, err := net.Dial("tcp", tt.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			body := `{"domain":"` + strings.Repeat("x", 1000) + `"}`
			start := time.Now()
			if _, err := fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: tollgate\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", tt.path, len(body)); err != nil {
				t.Fatal(err)
			}
			// One byte every poll, then a look for the end of the
			// connection (an answer, if any, is read on the way), for ten
			// times the read timeout: bounded, and far longer than the
			// timeout.
			sent, buf := 0, make([]byte, 512)
			err = polltest.Poll(10*readTimeout, 20*time.Millisecond, nil, func() error {
				if sent < len(body) {
					if _, err := conn.Write([]byte{body[sent]}); err != nil {
						return nil // closed, and the kernel says so
					}
					sent++
				}
				_ = conn.SetReadDeadline(time.Now().Add(time.Millisecond))
				for {
					_, err := conn.Read(buf)
					var ne net.Error
					switch {
					case err == nil:
						continue // the answer: read on to the end
					case errors.As(err, &ne) && ne.Timeout():
						return fmt.Errorf("the connection is open after %v and %d bytes of the body", time.Since(start), sent)
					default:
						return nil // EOF or reset: closed
					}
				}
			})
			if err != nil {
				t.Fatal(err)
			}
			if sent == len(body) {
				t.Fatalf("the whole body went through (%d bytes in %v): the trickle was too fast to tell", sent, time.Since(start))
			}
		})
	}
}

// TestHTTPMaxConnections holds one connection open at a limit of one: a
// second connection is not served until the first closes.
func TestHTTPMaxConnections(t *testing.T) {
	a := apptest.Start(t, rulesDir, apptest.Options{Settings: func(s *app.Settings) { s.Conns.HTTPMaxConns = 1 }})
	first := dialHTTP(t, a.HTTPAddr)
	if status := first.get(t, 5*time.Second); status != http.StatusOK {
		t.Fatalf("first connection: status %d", status)
	}
	second := dialHTTP(t, a.HTTPAddr) // the kernel completes the handshake; tollgate does not accept it
	// A negative, so a wait of fixed length: the answer would come in a
	// millisecond or two on loopback.
	if status := second.get(t, 300*time.Millisecond); status != 0 {
		t.Fatalf("second connection answered (status %d) while the first is open at --http-max-connections 1", status)
	}
	first.conn.Close()
	if status := second.read(t, 5*time.Second); status != http.StatusOK {
		t.Fatalf("second connection, once the first closed: status %d", status)
	}
}

// httpConn is a raw HTTP/1.1 client connection.
type httpConn struct {
	conn net.Conn
	r    *bufio.Reader
}

func dialHTTP(t *testing.T, addr string) *httpConn {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &httpConn{conn: conn, r: bufio.NewReader(conn)}
}

// get sends GET /healthz and returns the answer's status, or 0 if none
// came within d.
func (c *httpConn) get(t *testing.T, d time.Duration) int {
	t.Helper()
	if _, err := io.WriteString(c.conn, "GET /healthz HTTP/1.1\r\nHost: tollgate\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	return c.read(t, d)
}

// read returns the status of the next answer, or 0 if none came within d.
func (c *httpConn) read(t *testing.T, d time.Duration) int {
	t.Helper()
	_ = c.conn.SetReadDeadline(time.Now().Add(d))
	resp, err := http.ReadResponse(c.r, nil)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode
}

// TestDebugProfileOutlivesTimeouts takes a CPU profile longer than the
// read, write and idle timeouts, which the debug server shares with the
// HTTP server: the profile runs for the seconds asked all the same.
func TestDebugProfileOutlivesTimeouts(t *testing.T) {
	a := apptest.Start(t, rulesDir, apptest.Options{Settings: func(s *app.Settings) {
		s.Conns.HTTPReadTimeout, s.Conns.HTTPWriteTimeout, s.Conns.HTTPIdleTimeout = 100*time.Millisecond, 100*time.Millisecond, 100*time.Millisecond
	}})
	start := time.Now()
	resp, err := http.Get("http://" + a.DebugAddr + "/debug/pprof/profile?seconds=1")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); resp.StatusCode != http.StatusOK || len(data) == 0 || took < time.Second {
		t.Fatalf("profile: status %d, %d bytes after %v; want 200 and a profile of 1s", resp.StatusCode, len(data), took)
	}
}

// TestGRPCMaxConnectionAge holds a gRPC connection past
// --grpc-max-connection-age: the server ends it, and the client's next
// call goes over a new one.
func TestGRPCMaxConnectionAge(t *testing.T) {
	a := apptest.Start(t, rulesDir, apptest.Options{Settings: func(s *app.Settings) {
		s.Conns.GRPCMaxAge, s.Conns.GRPCMaxAgeGrace = 200*time.Millisecond, time.Second
	}})
	conns := &connCounter{}
	cc, err := grpc.NewClient(a.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithStatsHandler(conns))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	health := healthpb.NewHealthClient(cc)
	check := func() {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := health.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	check()
	polltest.Eventually(t, 5*time.Second, func() bool { return conns.ended.Load() == 1 },
		"the connection is still open past its age (200ms ±10%% and 1s grace)")
	check()
	if n := conns.begun.Load(); n != 2 {
		t.Fatalf("%d connections begun, want 2: the first aged out, the second for the last call", n)
	}
}

// connCounter counts a gRPC client's connections.
type connCounter struct{ begun, ended atomic.Int32 }

func (c *connCounter) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }
func (c *connCounter) HandleRPC(context.Context, stats.RPCStats)                       {}
func (c *connCounter) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context {
	return ctx
}

func (c *connCounter) HandleConn(_ context.Context, s stats.ConnStats) {
	switch s.(type) {
	case *stats.ConnBegin:
		c.begun.Add(1)
	case *stats.ConnEnd:
		c.ended.Add(1)
	}
}

// TestGRPCMaxConcurrentStreams reads the limit the gRPC server announces
// in its HTTP/2 settings: the default, and one that is set.
func TestGRPCMaxConcurrentStreams(t *testing.T) {
	for _, want := range []uint32{1024, 7} {
		t.Run(fmt.Sprint(want), func(t *testing.T) {
			a := apptest.Start(t, rulesDir, apptest.Options{Settings: func(s *app.Settings) {
				if want != 1024 {
					s.Conns.GRPCMaxStreams = int(want)
				}
			}})
			c := dialH2(t, a.GRPCAddr)
			got, ok := c.settings[http2.SettingMaxConcurrentStreams]
			if !ok || got != want {
				t.Fatalf("SETTINGS_MAX_CONCURRENT_STREAMS %d (sent: %v), want %d", got, ok, want)
			}
		})
	}
}

// TestGRPCKeepalivePings pings the gRPC server with no call in flight:
// at the interval --grpc-keepalive-min-time allows the connection stays
// open (Envoy's connection_keepalive pings so, calls or not); a flood is
// sent GOAWAY.
func TestGRPCKeepalivePings(t *testing.T) {
	const minTime = 50 * time.Millisecond
	a := apptest.Start(t, rulesDir, apptest.Options{Settings: func(s *app.Settings) { s.Conns.GRPCKeepaliveMinTime = minTime }})

	c := dialH2(t, a.GRPCAddr)
	// One ping per poll, at twice the interval allowed; grpc-go's
	// default policy would answer the fourth with GOAWAY.
	acked, refused := 0, error(nil)
	err := polltest.Poll(10*time.Second, 2*minTime, nil, func() error {
		if refused = c.ping(); refused != nil {
			return nil // stop here
		}
		if acked++; acked < 6 {
			return errors.New("not yet")
		}
		return nil
	})
	if err != nil || refused != nil {
		t.Fatalf("pings %v apart with no call in flight: %d acked, then %v %v", 2*minTime, acked, refused, err)
	}

	flood := dialH2(t, a.GRPCAddr)
	for i := range 10 {
		if err := flood.ping(); err != nil {
			var ga goAwayError
			if !errors.As(err, &ga) || ga.code != http2.ErrCodeEnhanceYourCalm || ga.debug != "too_many_pings" {
				t.Fatalf("flood, ping %d: %v; want GOAWAY ENHANCE_YOUR_CALM too_many_pings", i+1, err)
			}
			return
		}
	}
	t.Fatal("ten pings at once were all answered: no keepalive enforcement")
}

// h2Conn is a raw HTTP/2 client connection (h2c) to the gRPC server.
type h2Conn struct {
	conn     net.Conn
	fr       *http2.Framer
	settings map[http2.SettingID]uint32 // the server's
}

// dialH2 opens an HTTP/2 connection and reads the server's settings.
func dialH2(t *testing.T, addr string) *h2Conn {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	c := &h2Conn{conn: conn, fr: http2.NewFramer(conn, conn), settings: map[http2.SettingID]uint32{}}
	if _, err := io.WriteString(conn, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	if err := c.fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			t.Fatal(err)
		}
		if sf, ok := f.(*http2.SettingsFrame); ok && !sf.IsAck() {
			_ = sf.ForeachSetting(func(s http2.Setting) error { c.settings[s.ID] = s.Val; return nil })
			if err := c.fr.WriteSettingsAck(); err != nil {
				t.Fatal(err)
			}
			return c
		}
	}
}

// goAwayError is a GOAWAY frame the server sent.
type goAwayError struct {
	code  http2.ErrCode
	debug string
}

func (e goAwayError) Error() string { return fmt.Sprintf("GOAWAY %v %q", e.code, e.debug) }

// ping sends a PING and reads frames up to its ack; a GOAWAY before it
// is a goAwayError.
func (c *h2Conn) ping() error {
	_ = c.conn.SetDeadline(time.Now().Add(5 * time.Second))
	data := [8]byte{'t', 'o', 'l', 'l', 'g', 'a', 't', 'e'}
	if err := c.fr.WritePing(false, data); err != nil {
		return err
	}
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			return err
		}
		switch f := f.(type) {
		case *http2.GoAwayFrame:
			return goAwayError{code: f.ErrCode, debug: string(f.DebugData())}
		case *http2.PingFrame:
			if f.IsAck() && f.Data == data {
				return nil
			}
		}
	}
}
