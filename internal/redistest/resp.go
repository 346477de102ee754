package redistest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
)

// The harness speaks RESP2 itself: it sends a handful of commands with exact
// deadlines and needs neither a pool, retries nor redirects, so it stays free
// of client dependencies.

// replyError is an error reply of Redis, such as "MOVED 3999 127.0.0.1:7000".
type replyError string

func (e replyError) Error() string { return string(e) }

// client is one RESP2 connection. Every command has its own deadline.
type client struct {
	conn    net.Conn
	r       *bufio.Reader
	timeout time.Duration
}

// dial connects to addr and authenticates when password is set.
func dial(addr, password string, timeout time.Duration) (*client, error) {
	conn, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return nil, err
	}
	c := &client{conn: conn, r: bufio.NewReader(conn), timeout: timeout}
	if password != "" {
		if _, err := c.do("AUTH", password); err != nil {
			conn.Close()
			return nil, fmt.Errorf("AUTH: %w", err)
		}
	}
	return c, nil
}

func (c *client) close() error { return c.conn.Close() }

// do sends one command and reads its reply: a string, an int64, nil, or a
// []any of those. An error reply is returned as a replyError.
func (c *client) do(args ...string) (any, error) {
	if err := c.conn.SetDeadline(time.Now().Add(c.timeout)); err != nil {
		return nil, err
	}
	buf := make([]byte, 0, 64)
	buf = fmt.Appendf(buf, "*%d\r\n", len(args))
	for _, a := range args {
		buf = fmt.Appendf(buf, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := c.conn.Write(buf); err != nil {
		return nil, err
	}
	return c.read()
}

func (c *client) read() (any, error) {
	line, err := c.r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	line = strings.TrimSuffix(line, "\r\n")
	if line == "" {
		return nil, errors.New("empty RESP line")
	}
	body := line[1:]
	switch line[0] {
	case '+':
		return body, nil
	case '-':
		return nil, replyError(body)
	case ':':
		return strconv.ParseInt(body, 10, 64)
	case '$':
		n, err := strconv.Atoi(body)
		if err != nil || n < 0 {
			return nil, err
		}
		b := make([]byte, n+2)
		if _, err := io.ReadFull(c.r, b); err != nil {
			return nil, err
		}
		return string(b[:n]), nil
	case '*':
		n, err := strconv.Atoi(body)
		if err != nil || n < 0 {
			return nil, err
		}
		arr := make([]any, n)
		for i := range arr {
			v, err := c.read()
			var re replyError
			if errors.As(err, &re) {
				v, err = re, nil
			}
			if err != nil {
				return nil, err
			}
			arr[i] = v
		}
		return arr, nil
	}
	return nil, fmt.Errorf("unexpected RESP line %q", line)
}

// command runs one command on a new connection to addr.
func command(addr, password string, timeout time.Duration, args ...string) (any, error) {
	c, err := dial(addr, password, timeout)
	if err != nil {
		return nil, err
	}
	defer c.close()
	return c.do(args...)
}

// commandString is command for replies that are strings (INFO, CLUSTER INFO).
func commandString(addr, password string, args ...string) (string, error) {
	v, err := command(addr, password, commandTimeout, args...)
	if err != nil {
		return "", err
	}
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("%s: reply %v is not a string", args[0], v)
	}
	return s, nil
}
