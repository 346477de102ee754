package rls

import (
	"errors"
	"io"
	"log/slog"
	"net/http"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
)

// JSONHandler returns envoyproxy/ratelimit's POST /json endpoint, for
// clients that cannot speak gRPC: the body is a RateLimitRequest in the
// protobuf JSON mapping, and the answer is the RateLimitResponse in the same
// mapping, with status 200 for OK and 429 for OVER_LIMIT.
//
// Errors are plain text: 400 for a body that does not decode or a request
// ShouldRateLimit rejects as malformed, 413 for a body over the limit set by
// http.MaxBytesReader, 503 and 504 when the engine is unavailable or the
// request's context ends, 500 otherwise. (envoyproxy/ratelimit answers 400
// to every error.)
func (s *Server) JSONHandler() http.Handler {
	return http.HandlerFunc(s.serveJSON)
}

func (s *Server) serveJSON(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "method not allowed: use POST", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			http.Error(w, "request body too large", http.StatusRequestEntityTooLarge)
			return
		}
		http.Error(w, "reading request body: "+err.Error(), http.StatusBadRequest)
		return
	}
	var req rlsv3.RateLimitRequest
	if err := protojson.Unmarshal(body, &req); err != nil {
		http.Error(w, "decoding RateLimitRequest: "+err.Error(), http.StatusBadRequest)
		return
	}
	resp, err := s.shouldRateLimit(r.Context(), &req, s.untrustedJSON)
	if err != nil {
		st := status.Convert(err)
		http.Error(w, st.Message(), httpStatus(st.Code()))
		return
	}
	out, err := protojson.Marshal(resp)
	if err != nil {
		s.log.ErrorContext(r.Context(), "encoding RateLimitResponse", slog.Any("error", err))
		http.Error(w, "encoding response", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT {
		w.WriteHeader(http.StatusTooManyRequests)
	}
	_, _ = w.Write(out)
}

// httpStatus maps the gRPC codes ShouldRateLimit returns to HTTP statuses.
func httpStatus(c codes.Code) int {
	switch c {
	case codes.InvalidArgument:
		return http.StatusBadRequest
	case codes.Unavailable:
		return http.StatusServiceUnavailable
	case codes.DeadlineExceeded, codes.Canceled:
		return http.StatusGatewayTimeout
	}
	return http.StatusInternalServerError
}
