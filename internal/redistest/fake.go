package redistest

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// Fake is a loopback server that speaks just enough RESP2 to tell a client
// its version: it answers INFO with the redis_version it was started with,
// PING with PONG, and every other command with an unknown-command error. It
// stands in for Redis versions that cannot be installed here, such as one
// older than the store supports.
type Fake struct {
	// Addr is the server's host:port.
	Addr    string
	version string

	mu    sync.Mutex
	infos int
}

// StartFake starts a Fake reporting redis_version version; it stops in
// t.Cleanup.
func StartFake(t testing.TB, version string) *Fake {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("redistest: listening for a fake server: %v", err)
	}
	f := &Fake{Addr: lis.Addr().String(), version: version}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns []net.Conn
	)
	t.Cleanup(func() {
		lis.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			conn, err := lis.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, conn)
			mu.Unlock()
			wg.Go(func() { f.serve(conn) })
		}
	})
	return f
}

// Infos returns the number of INFO commands the server has answered.
func (f *Fake) Infos() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.infos
}

// serve answers the commands of one connection until it closes.
func (f *Fake) serve(conn net.Conn) {
	defer conn.Close()
	r := bufio.NewReader(conn)
	for {
		args, err := readCommand(r)
		if err != nil {
			return
		}
		var reply string
		switch strings.ToUpper(args[0]) {
		case "INFO":
			f.mu.Lock()
			f.infos++
			f.mu.Unlock()
			body := "# Server\r\nredis_version:" + f.version + "\r\n"
			reply = fmt.Sprintf("$%d\r\n%s\r\n", len(body), body)
		case "PING":
			reply = "+PONG\r\n"
		default:
			reply = "-ERR unknown command '" + args[0] + "'\r\n"
		}
		if _, err := io.WriteString(conn, reply); err != nil {
			return
		}
	}
}

// readCommand reads one command: a RESP array of bulk strings.
func readCommand(r *bufio.Reader) ([]string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	n, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "*")))
	if err != nil || n < 1 || n > 1024 {
		return nil, fmt.Errorf("bad command header %q", line)
	}
	args := make([]string, n)
	for i := range args {
		if line, err = r.ReadString('\n'); err != nil {
			return nil, err
		}
		size, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "$")))
		if err != nil || size < 0 || size > 1<<20 {
			return nil, fmt.Errorf("bad bulk header %q", line)
		}
		buf := make([]byte, size+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, err
		}
		args[i] = string(buf[:size])
	}
	return args, nil
}
