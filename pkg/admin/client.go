package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"syscall"

	"github.com/tollgatehq/tollgate/pkg/descriptor"
)

// The errors of Client, for errors.Is.
var (
	// ErrDisabled reports an address where no admin API answers: nothing
	// listens there, or an HTTP server that does not serve the API.
	ErrDisabled = errors.New("no admin API there: tollgate serves it on its --admin-addr (127.0.0.1:8082 by default), and only when an admin token is configured")
	// ErrUnauthorized reports a token the server refused.
	ErrUnauthorized = errors.New("the admin token was refused")
)

// APIError is an error answer of the admin API.
type APIError struct {
	Status  int    // the HTTP status
	Message string // the answer's "error"
}

// Error returns the status and the server's message.
func (e *APIError) Error() string {
	return fmt.Sprintf("%d %s: %s", e.Status, http.StatusText(e.Status), e.Message)
}

// ClientOptions configure a Client.
type ClientOptions struct {
	// Addr is tollgate's HTTP address: host:port, or an http:// or
	// https:// URL.
	Addr string
	// Token is the bearer token sent with every call.
	Token string
	// HTTPClient makes the calls; nil means http.DefaultClient.
	HTTPClient *http.Client
}

// Client calls the admin API of a running tollgate. Its methods return the
// answer's JSON as the server sent it.
type Client struct {
	base  *url.URL
	token string
	http  *http.Client
}

// NewClient returns a Client for opts.Addr.
func NewClient(opts ClientOptions) (*Client, error) {
	addr := opts.Addr
	if !strings.Contains(addr, "://") {
		addr = "http://" + addr
	}
	base, err := url.Parse(addr)
	if err != nil || (base.Scheme != "http" && base.Scheme != "https") || base.Host == "" {
		return nil, fmt.Errorf("admin address %q: want host:port or an http:// or https:// URL", opts.Addr)
	}
	if base.Path == "" {
		base.Path = "/"
	}
	c := &Client{base: base, token: opts.Token, http: opts.HTTPClient}
	if c.http == nil {
		c.http = http.DefaultClient
	}
	return c, nil
}

// CheckDescriptor is one descriptor of the body of /v1/check,
// /v1/remaining and /v1/reset.
type CheckDescriptor struct {
	Entries []descriptor.Entry `json:"entries"`
}

// CheckRequest is the body of /v1/check, /v1/remaining and /v1/reset.
type CheckRequest struct {
	Domain      string            `json:"domain"`
	Descriptors []CheckDescriptor `json:"descriptors"`
}

// CreateOverride creates an override.
func (c *Client) CreateOverride(ctx context.Context, req CreateRequest) (json.RawMessage, error) {
	return c.do(ctx, http.MethodPost, "/v1/overrides", nil, req)
}

// ListOverrides lists the live overrides of domain, or of all for "".
func (c *Client) ListOverrides(ctx context.Context, domain string) (json.RawMessage, error) {
	var q url.Values
	if domain != "" {
		q = url.Values{"domain": {domain}}
	}
	return c.do(ctx, http.MethodGet, "/v1/overrides", q, nil)
}

// GetOverride returns one override.
func (c *Client) GetOverride(ctx context.Context, id string) (json.RawMessage, error) {
	return c.do(ctx, http.MethodGet, "/v1/overrides/"+url.PathEscape(id), nil, nil)
}

// DeleteOverride deletes one override, giving reason to the audit.
func (c *Client) DeleteOverride(ctx context.Context, id, reason string) (json.RawMessage, error) {
	return c.do(ctx, http.MethodDelete, "/v1/overrides/"+url.PathEscape(id), reasonQuery(reason), nil)
}

// Remaining answers req as /v1/check would, consuming nothing.
func (c *Client) Remaining(ctx context.Context, req CheckRequest) (json.RawMessage, error) {
	return c.do(ctx, http.MethodPost, "/v1/remaining", nil, req)
}

// Reset clears the counters of req's descriptors, giving reason to the
// audit.
func (c *Client) Reset(ctx context.Context, req CheckRequest, reason string) (json.RawMessage, error) {
	return c.do(ctx, http.MethodPost, "/v1/reset", reasonQuery(reason), req)
}

// Audit returns the newest limit audit entries; 0 means the server's
// default.
func (c *Client) Audit(ctx context.Context, limit int) (json.RawMessage, error) {
	var q url.Values
	if limit > 0 {
		q = url.Values{"limit": {strconv.Itoa(limit)}}
	}
	return c.do(ctx, http.MethodGet, "/v1/audit", q, nil)
}

// TopQuery is the query of GET /v1/top. Domain is required; a zero field
// takes the server's default.
type TopQuery struct {
	// Set is "shadow" for the shadow rules' top clients; "" means the
	// live rules'.
	Set    string
	Domain string
	// Rule filters by the rule's name or its path as explain prints it.
	Rule string
	// By is "rejected" or "requests"; Window is "1m", "5m" or "1h".
	By, Window string
	Limit      int
}

// Top returns the busiest descriptor values of a domain's rules, merged
// over the fleet.
func (c *Client) Top(ctx context.Context, q TopQuery) (json.RawMessage, error) {
	v := url.Values{"domain": {q.Domain}}
	for name, s := range map[string]string{"set": q.Set, "rule": q.Rule, "by": q.By, "window": q.Window} {
		if s != "" {
			v.Set(name, s)
		}
	}
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	return c.do(ctx, http.MethodGet, "/v1/top", v, nil)
}

// RulesQuery is the query of GET /v1/rules; a zero field filters
// nothing.
type RulesQuery struct {
	// Set is "shadow" for the shadow rules; "" means the live rules.
	Set          string
	Domain, Rule string
}

// Rules returns per rule its limit, its rates and its hottest value's
// share of the limit, of the rules q names.
func (c *Client) Rules(ctx context.Context, q RulesQuery) (json.RawMessage, error) {
	v := url.Values{}
	for name, s := range map[string]string{"set": q.Set, "domain": q.Domain, "rule": q.Rule} {
		if s != "" {
			v.Set(name, s)
		}
	}
	return c.do(ctx, http.MethodGet, "/v1/rules", v, nil)
}

// reasonQuery returns the query that gives reason to the audit, if any.
func reasonQuery(reason string) url.Values {
	if reason == "" {
		return nil
	}
	return url.Values{"reason": {reason}}
}

// do makes one call and returns the answer's body, or the error it
// stands for.
func (c *Client) do(ctx context.Context, method, path string, query url.Values, body any) (json.RawMessage, error) {
	u := c.base.JoinPath(path)
	u.RawQuery = query.Encode()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, fmt.Errorf("encoding the body of %s %s: %w", method, path, err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), rd)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	resp, err := c.http.Do(req)
	if errors.Is(err, syscall.ECONNREFUSED) {
		return nil, fmt.Errorf("calling tollgate at %s: %w: %w", c.base.Host, err, ErrDisabled)
	}
	if err != nil {
		return nil, fmt.Errorf("calling tollgate at %s: %w", c.base.Host, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, fmt.Errorf("reading the answer of %s %s: %w", method, u.Path, err)
	}
	if resp.StatusCode < 300 {
		return data, nil
	}
	var answer struct {
		Error string `json:"error"`
	}
	isJSON := strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") && json.Unmarshal(data, &answer) == nil
	switch {
	case resp.StatusCode == http.StatusUnauthorized:
		return nil, fmt.Errorf("%s %s: %w", method, u.Path, ErrUnauthorized)
	case resp.StatusCode == http.StatusNotFound && !isJSON:
		// The mux's own 404: the path is not served at all.
		return nil, fmt.Errorf("%s: %w", c.base.Host, ErrDisabled)
	case isJSON && answer.Error != "":
		return nil, &APIError{Status: resp.StatusCode, Message: answer.Error}
	}
	return nil, &APIError{Status: resp.StatusCode, Message: strings.TrimSpace(string(data))}
}

// ReadToken returns the first token of a token file in the format of
// TokensOptions.File, for a client to present.
func ReadToken(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	for line := range strings.Lines(string(data)) {
		fields := strings.Fields(line)
		if len(fields) == 0 || strings.HasPrefix(fields[0], "#") {
			continue
		}
		if len(fields) > 2 {
			break
		}
		return fields[len(fields)-1], nil
	}
	return "", fmt.Errorf("%s: its first line that is not blank or a comment is not TOKEN or NAME TOKEN", path)
}
