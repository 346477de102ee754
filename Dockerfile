# tollgate container image: a static binary on distroless, run as non-root.
#
#   docker build --build-arg VERSION=$(git describe --tags --always --dirty) -t tollgate .
#   (or: make image)
#
# The go build line uses the flags of `make build`; integration/deploy_test.go
# checks that the two agree, that USER is not root and that the health check
# runs `tollgate health`.

FROM golang:1.26.8-bookworm AS build
WORKDIR /src
# Modules first, so a source change does not download them again.
COPY go.mod go.sum ./
RUN go mod download
COPY cmd/ cmd/
COPY pkg/ pkg/
# The build context has no .git (.dockerignore), so the version comes in as
# an argument.
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X github.com/tollgatehq/tollgate/pkg/version.Version=${VERSION}" -o /out/tollgate ./cmd/tollgate

# static-debian12: CA certificates, tzdata and /etc/passwd, no shell, no
# libc; :nonroot runs as uid 65532.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/tollgate /usr/local/bin/tollgate
# The same binary also answers to envoyproxy/ratelimit's command path, so a
# deployment of it that sets `command: ["/bin/ratelimit"]` keeps working
# (distroless has no shell to make a link with).
COPY --from=build /out/tollgate /bin/ratelimit
# The examples are the default rules: the default --config-dir, config, is
# relative to the working directory. Mount a directory over
# /etc/tollgate/config (or set TOLLGATE_CONFIG_DIR) to serve your own. The
# directory is watched: an edit there reloads the rules. It is no ENV, so
# that envoyproxy/ratelimit's RUNTIME_ROOT can choose it instead.
WORKDIR /etc/tollgate
COPY config-examples/ /etc/tollgate/config/
# The admin listener (overrides, reset, audit; on with an admin token) and
# the debug listener (/debug/config, which lists the live overrides, and
# pprof) keep their defaults, the container's loopback: nothing outside the
# container reaches them. Expose one deliberately, with --admin-addr :8082
# or --debug-addr :6070 (or TOLLGATE_ADMIN_ADDR, TOLLGATE_DEBUG_ADDR), and
# publish it to the host's loopback only.
USER 65532:65532
# gRPC (RateLimitService, grpc.health.v1), HTTP (/v1/check, /metrics,
# /healthz, /readyz).
EXPOSE 8081 8080
# Exec form: the image has no shell.
HEALTHCHECK --interval=10s --timeout=3s --start-period=5s --retries=3 \
    CMD ["/usr/local/bin/tollgate", "health", "--addr", "127.0.0.1:8081", "--timeout", "2s"]
ENTRYPOINT ["/usr/local/bin/tollgate"]
CMD ["serve"]
