package cli

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/tollgatehq/tollgate/pkg/rls"
	"github.com/tollgatehq/tollgate/pkg/rlsclient"
)

// errNotServing is returned by health when the server answers with any
// status but SERVING.
var errNotServing = errors.New("not serving")

// newHealthCommand runs `tollgate health`: one grpc.health.v1 Check of a
// tollgate's gRPC listener, for container health checks in images without
// a shell or curl. It prints one line and succeeds when the service is
// SERVING; otherwise it returns a one-line error saying why, and Main
// exits 1.
func newHealthCommand(c cli) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "health [--addr HOST:PORT] [--service NAME] [--timeout D]",
		Short: "Check a tollgate's gRPC health: exit 0 when SERVING, 1 otherwise",
		Args:  noArgs,
	}
	fs := flags(cmd)
	addr := fs.String("addr", "127.0.0.1:8081", "gRPC address to check, HOST:PORT")
	service := fs.String("service", "", `health service to check: "" (the whole server), `+
		rls.ServiceName+" or "+rls.StoreServiceName)
	timeout := fs.Duration("timeout", 2*time.Second, "deadline of the check, the connection included")
	var tlsOpts rlsclient.TLS
	tlsOpts.Flags(fs)
	_ = cmd.RegisterFlagCompletionFunc("service", cobra.FixedCompletions(
		[]string{rls.ServiceName, rls.StoreServiceName}, cobra.ShellCompDirectiveNoFileComp))
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if *timeout <= 0 {
			return usageError("--timeout must be positive, got %v", *timeout)
		}
		target := *addr
		if *service != "" {
			target = fmt.Sprintf("%s service %q", *addr, *service)
		}
		st, err := checkHealth(cmd.Context(), *addr, tlsOpts, *service, *timeout)
		if err != nil {
			return fmt.Errorf("checking %s: %w", target, err)
		}
		if st != healthpb.HealthCheckResponse_SERVING {
			return fmt.Errorf("%s: %w (%v)", target, errNotServing, st)
		}
		fmt.Fprintf(c.stdout, "%s: %v\n", target, st)
		return nil
	}
	return cmd
}

// checkHealth asks the grpc.health.v1 service at addr, dialed as t says,
// for the status of service, waiting at most timeout. A gRPC error is
// returned as its code and message, which fit on one line.
func checkHealth(ctx context.Context, addr string, t rlsclient.TLS, service string, timeout time.Duration) (healthpb.HealthCheckResponse_ServingStatus, error) {
	client, err := rlsclient.DialTLS(addr, t)
	if err != nil {
		return 0, err
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	resp, err := healthpb.NewHealthClient(client.Conn()).Check(ctx, &healthpb.HealthCheckRequest{Service: service})
	if err != nil {
		s := status.Convert(err)
		return 0, fmt.Errorf("%v: %s", s.Code(), s.Message())
	}
	return resp.GetStatus(), nil
}
