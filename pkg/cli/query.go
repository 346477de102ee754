package cli

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/tollgatehq/tollgate/pkg/rlsclient"
)

func newQueryCommand(c cli) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "query --addr HOST:PORT --domain D --descriptor k=v[,k2=v2] [--descriptor ...] [--hits N]",
		Short: "Send one ShouldRateLimit call and print the answer",
		Args:  noArgs,
	}
	fs := flags(cmd)
	addr := fs.String("addr", "127.0.0.1:8081", "RateLimitService address")
	domain := fs.String("domain", "", "domain of the request")
	descs := fs.StringArray("descriptor", nil, "descriptor entries k=v,k2=v2; repeat for several descriptors")
	hits := fs.Uint32("hits", 0, "request hits_addend (0 means 1)")
	timeout := fs.Duration("timeout", 2*time.Second, "deadline of the call")
	var tlsOpts rlsclient.TLS
	tlsOpts.Flags(fs)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if *domain == "" || len(*descs) == 0 {
			return usageError("--domain and at least one --descriptor are required")
		}
		req := rlsclient.Request{Domain: *domain, Hits: *hits}
		for _, d := range *descs {
			entries, err := rlsclient.ParseDescriptor(d)
			if err != nil {
				return usageError("--descriptor %q: %v", d, err)
			}
			req.Descriptors = append(req.Descriptors, entries)
		}
		client, err := rlsclient.DialTLS(*addr, tlsOpts)
		if err != nil {
			return err
		}
		defer client.Close()
		ctx, cancel := context.WithTimeout(cmd.Context(), *timeout)
		defer cancel()
		resp, err := client.Query(ctx, req)
		if err != nil {
			return fmt.Errorf("querying %s: %w", *addr, err)
		}
		fmt.Fprint(c.stdout, rlsclient.Format(resp))
		return nil
	}
	return cmd
}
