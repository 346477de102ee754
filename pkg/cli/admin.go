package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/tollgatehq/tollgate/pkg/admin"
	"github.com/tollgatehq/tollgate/pkg/override"
	"github.com/tollgatehq/tollgate/pkg/rlsclient"
)

// adminFlags are the flags every admin command takes: where tollgate's
// admin listener is, how to reach it, and the token to present.
type adminFlags struct {
	addr      string
	tls       rlsclient.TLS
	tokenFile string
	timeout   time.Duration
}

func (f *adminFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.addr, "addr", "127.0.0.1:8082", "tollgate's admin address (its --admin-addr): host:port, or an http:// or https:// URL")
	f.tls.Flags(fs)
	fs.StringVar(&f.tokenFile, "token-file", "", "file holding the admin token (its first TOKEN or NAME TOKEN line); default: TOLLGATE_ADMIN_TOKEN")
	fs.DurationVar(&f.timeout, "timeout", 10*time.Second, "deadline of the call")
}

// client returns an admin client for the flags, with the token from
// --token-file or else TOLLGATE_ADMIN_TOKEN.
func (f *adminFlags) client(getenv func(string) string) (*admin.Client, error) {
	token := strings.TrimSpace(getenv("TOLLGATE_ADMIN_TOKEN"))
	if f.tokenFile != "" {
		var err error
		if token, err = admin.ReadToken(f.tokenFile); err != nil {
			return nil, fmt.Errorf("--token-file: %w", err)
		}
	}
	if token == "" {
		return nil, usageError("no admin token: give --token-file or set TOLLGATE_ADMIN_TOKEN")
	}
	opts := admin.ClientOptions{Addr: f.addr, Token: token}
	cfg, err := f.tls.Config()
	if err != nil {
		return nil, usageError("%v", err)
	}
	if cfg != nil {
		transport := http.DefaultTransport.(*http.Transport).Clone()
		transport.TLSClientConfig = cfg
		opts.HTTPClient = &http.Client{Transport: transport}
		if !strings.Contains(opts.Addr, "://") {
			opts.Addr = "https://" + opts.Addr
		}
	}
	c, err := admin.NewClient(opts)
	if err != nil {
		return nil, usageError("--addr: %v", err)
	}
	return c, nil
}

// adminCall runs call with a client and the flags' deadline and prints
// its answer, indented.
func (c cli) adminCall(cmd *cobra.Command, f *adminFlags, call func(context.Context, *admin.Client) (json.RawMessage, error)) error {
	client, err := f.client(c.getenv)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), f.timeout)
	defer cancel()
	answer, err := call(ctx, client)
	if err != nil {
		return err
	}
	var out bytes.Buffer
	if err := json.Indent(&out, bytes.TrimSpace(answer), "", "  "); err != nil {
		return fmt.Errorf("the answer is not JSON: %w", err)
	}
	out.WriteByte('\n')
	_, err = c.stdout.Write(out.Bytes())
	return err
}

func newAdminCommand(c cli) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "admin",
		Short: "Call a running tollgate's admin API: overrides, remaining, reset, audit, top",
		Long: `Call the admin API of a running tollgate over HTTP and print its JSON answer
(admin top prints a table unless --json).
The admin API is on when tollgate has an admin token (--admin-token-file or
TOLLGATE_ADMIN_TOKEN), on its own listener (--admin-addr, 127.0.0.1:8082 by
default); these commands present a token, from --token-file or
TOLLGATE_ADMIN_TOKEN, and --tls-* reach a listener served over TLS.`,
		RunE: groupRun,
	}
	var f adminFlags
	f.register(cmd.PersistentFlags())
	cmd.AddCommand(newAdminOverridesCommand(c, &f), newAdminRemainingCommand(c, &f), newAdminResetCommand(c, &f), newAdminAuditCommand(c, &f), newAdminTopCommand(c, &f))
	return cmd
}

func newAdminOverridesCommand(c cli, f *adminFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "overrides",
		Short: "List, show, create and delete live overrides",
		RunE:  groupRun,
	}

	list := &cobra.Command{Use: "list [--domain D]", Short: "List the live overrides, oldest first", Args: noArgs}
	listDomain := flags(list).String("domain", "", "only the overrides of this domain")
	list.RunE = func(cmd *cobra.Command, _ []string) error {
		return c.adminCall(cmd, f, func(ctx context.Context, cl *admin.Client) (json.RawMessage, error) {
			return cl.ListOverrides(ctx, *listDomain)
		})
	}

	get := &cobra.Command{Use: "get ID", Short: "Show one override", Args: oneID}
	get.RunE = func(cmd *cobra.Command, args []string) error {
		return c.adminCall(cmd, f, func(ctx context.Context, cl *admin.Client) (json.RawMessage, error) {
			return cl.GetOverride(ctx, args[0])
		})
	}

	del := &cobra.Command{Use: "delete ID [--reason R]", Short: "Delete an override", Args: oneID}
	delReason := flags(del).String("reason", "", "why, for the audit log")
	del.RunE = func(cmd *cobra.Command, args []string) error {
		return c.adminCall(cmd, f, func(ctx context.Context, cl *admin.Client) (json.RawMessage, error) {
			return cl.DeleteOverride(ctx, args[0], *delReason)
		})
	}

	cmd.AddCommand(list, get, newAdminCreateCommand(c, f), del)
	return cmd
}

func newAdminCreateCommand(c cli, f *adminFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "create --domain D --descriptor k=v[,k2=v2] (--limit N/UNIT | --multiplier X) (--expires-in 48h | --expires-at RFC3339) [--reason R]",
		Short: "Create an override of the limits a descriptor prefix resolves to",
		Args:  noArgs,
	}
	fs := flags(cmd)
	domain := fs.String("domain", "", "domain of the override")
	desc := fs.String("descriptor", "", "descriptor prefix the override applies to: k=v,k2=v2")
	limit := fs.String("limit", "", "absolute limit N/UNIT, such as 5000/minute")
	multiplier := fs.Float64("multiplier", 0, "multiply the rule's limits by this, such as 5 or 0.5")
	expiresIn := fs.String("expires-in", "", "lifetime, a Go duration such as 48h")
	expiresAt := fs.String("expires-at", "", "expiry, RFC 3339 such as 2026-12-01T00:00:00Z")
	reason := fs.String("reason", "", "why, for the audit log")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if *domain == "" || *desc == "" {
			return usageError("--domain and --descriptor are required")
		}
		entries, err := rlsclient.ParseDescriptor(*desc)
		if err != nil {
			return usageError("--descriptor: %v", err)
		}
		req := admin.CreateRequest{Domain: *domain, Entries: entries, Reason: *reason}
		switch {
		case (*limit == "") == !fs.Changed("multiplier"):
			return usageError("give one of --limit and --multiplier")
		case *limit != "":
			n, unit, ok := strings.Cut(*limit, "/")
			rpu, err := strconv.ParseUint(n, 10, 32)
			if !ok || err != nil || unit == "" {
				return usageError("--limit: want N/UNIT such as 5000/minute, got %q", *limit)
			}
			req.Limit = &override.Limit{RequestsPerUnit: uint32(rpu), Unit: unit}
		default:
			req.Multiplier = multiplier
		}
		switch {
		case (*expiresIn == "") == (*expiresAt == ""):
			return usageError("give one of --expires-in and --expires-at")
		case *expiresIn != "":
			req.ExpiresIn = expiresIn
		default:
			at, err := time.Parse(time.RFC3339, *expiresAt)
			if err != nil {
				return usageError("--expires-at: %v", err)
			}
			req.ExpiresAt = &at
		}
		return c.adminCall(cmd, f, func(ctx context.Context, cl *admin.Client) (json.RawMessage, error) {
			return cl.CreateOverride(ctx, req)
		})
	}
	return cmd
}

// checkRun registers on fs the flags of a command that sends the body of
// /v1/check, a domain and descriptors, and returns the command's RunE: it
// builds the request from them and sends it with send.
func (c cli) checkRun(fs *pflag.FlagSet, f *adminFlags, send func(context.Context, *admin.Client, admin.CheckRequest) (json.RawMessage, error)) func(*cobra.Command, []string) error {
	domain := fs.String("domain", "", "domain of the request")
	descs := fs.StringArray("descriptor", nil, "descriptor entries k=v,k2=v2; repeat for several descriptors")
	return func(cmd *cobra.Command, _ []string) error {
		if *domain == "" || len(*descs) == 0 {
			return usageError("--domain and at least one --descriptor are required")
		}
		req := admin.CheckRequest{Domain: *domain}
		for _, d := range *descs {
			entries, err := rlsclient.ParseDescriptor(d)
			if err != nil {
				return usageError("--descriptor %q: %v", d, err)
			}
			req.Descriptors = append(req.Descriptors, admin.CheckDescriptor{Entries: entries})
		}
		return c.adminCall(cmd, f, func(ctx context.Context, cl *admin.Client) (json.RawMessage, error) {
			return send(ctx, cl, req)
		})
	}
}

func newAdminRemainingCommand(c cli, f *adminFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "remaining --domain D --descriptor k=v[,k2=v2] [--descriptor ...]",
		Short: "Show what remains of the limits of descriptors, consuming nothing",
		Args:  noArgs,
	}
	cmd.RunE = c.checkRun(flags(cmd), f, func(ctx context.Context, cl *admin.Client, req admin.CheckRequest) (json.RawMessage, error) {
		return cl.Remaining(ctx, req)
	})
	return cmd
}

func newAdminResetCommand(c cli, f *adminFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "reset --domain D --descriptor k=v[,k2=v2] [--descriptor ...] [--reason R]",
		Short: "Clear the counters of the rules descriptors resolve to",
		Args:  noArgs,
	}
	fs := flags(cmd)
	var reason string
	cmd.RunE = c.checkRun(fs, f, func(ctx context.Context, cl *admin.Client, req admin.CheckRequest) (json.RawMessage, error) {
		return cl.Reset(ctx, req, reason)
	})
	fs.StringVar(&reason, "reason", "", "why, for the audit log")
	return cmd
}

func newAdminAuditCommand(c cli, f *adminFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "audit [--limit N]",
		Short: "Show the newest entries of the audit log, oldest first",
		Args:  noArgs,
	}
	limit := flags(cmd).Int("limit", 0, "most entries to show (0: the server's default, 100)")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if *limit < 0 {
			return usageError("--limit: must not be negative, got %d", *limit)
		}
		return c.adminCall(cmd, f, func(ctx context.Context, cl *admin.Client) (json.RawMessage, error) {
			return cl.Audit(ctx, *limit)
		})
	}
	return cmd
}

// groupRun runs a command that only groups others: alone it prints its
// help; with an argument that names none of them it is a usage error.
func groupRun(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usageError("unknown command %q", args[0])
	}
	return cmd.Help()
}

// oneID is a cobra.PositionalArgs that wants one override id.
func oneID(_ *cobra.Command, args []string) error {
	if len(args) != 1 {
		return usageError("want one override ID, got %d arguments", len(args))
	}
	return nil
}
