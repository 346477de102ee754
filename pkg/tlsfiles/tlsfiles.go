// Package tlsfiles serves a TLS server's certificate, key and client CA
// from files that may be replaced while the process runs, as cert-manager
// and Kubernetes secret mounts replace them.
//
// Every handshake stats the files, which costs a few microseconds beside
// the handshake's own public-key work. When one has changed since it was
// last read — a new inode after a "..data" symlink swap or a rename, or a
// new size or modification time after an in-place rewrite — all of them are
// read again and a new tls.Config is built, which this handshake and later
// ones use. Connections already established keep the certificate they were
// made with. File timestamps are coarse (a few milliseconds, a second on
// some file systems), so while a file's modification time is within
// RacyWindow of the last check, handshakes compare its contents too and a
// quick second rewrite is not missed. There is no watcher goroutine: nothing
// to start or stop, and no event to lose.
//
// A replacement that does not load (half written, a key that does not match
// the certificate, a CA file without a certificate) leaves the last good
// configuration in use. The failure is logged once for that version of the
// files, and they are read again when they change next. Only the first
// load, in New, fails.
//
// What it does not do: it does not check expiry (a certificate past its
// NotAfter is served, and clients refuse it), and it does not reload on a
// timer, only on a handshake.
//
// Log lines and errors name the files, never their contents.
//
// For the client side of a connection, ClientConfig reads a CA file and an
// optional client certificate and key once, into a configuration that
// verifies the server; it does not follow a rotation.
package tlsfiles

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// RacyWindow is how recently a file may have been modified for its
// modification time not to prove that it is unchanged.
const RacyWindow = 2 * time.Second

var (
	// ErrNoClientCA reports a client CA file without any PEM certificate.
	ErrNoClientCA = errors.New("no PEM certificate in the client CA file")
	// ErrClientSAN reports a client certificate without the required SAN.
	ErrClientSAN = errors.New("client certificate lacks the required subject alternative name")
	// ErrSANWithoutCA reports a required client SAN without a client CA,
	// which would ask no client for a certificate to check it in.
	ErrSANWithoutCA = errors.New("a required client SAN needs a client CA")
)

// Options name the files a Server serves. CertFile and KeyFile are
// required.
type Options struct {
	// CertFile is the PEM certificate chain, leaf first.
	CertFile string
	// KeyFile is the PEM private key of the leaf.
	KeyFile string
	// ClientCAFile, when set, holds the PEM certificates of the CAs that
	// sign client certificates. Every client must then present a
	// certificate that chains to one of them (and only to them: the system
	// roots are not trusted for clients).
	ClientCAFile string
	// ClientSAN, when set, is a subject alternative name the client's
	// certificate must carry: a DNS name (matched as x509 matches host
	// names, wildcards included), an IP address, or a URI such as a SPIFFE
	// ID, compared exactly. It needs ClientCAFile.
	ClientSAN string
	// Logger receives reloads and failed reloads. Nil discards them.
	Logger *slog.Logger
	// Now returns the current time, for the racy-timestamp check. Nil
	// means time.Now.
	Now func() time.Time
}

// Server serves the TLS configuration built from the files in its Options,
// rebuilt when they change. It is safe for concurrent use.
type Server struct {
	opts Options
	log  *slog.Logger
	now  func() time.Time

	mu  sync.Mutex // serializes reloads
	cur atomic.Pointer[state]
}

// state is the result of the last read of the files.
type state struct {
	// stamps identify the files as they were when last read, successfully
	// or not, in the order of Server.paths.
	stamps []stamp
	// racy is set when a file's modification time was too recent to
	// prove that a later, equal stamp means equal contents.
	racy bool
	// contents are the bytes last read, in the order of Server.paths.
	contents [][]byte
	// config is the last good configuration.
	config *tls.Config
	// leaf is the certificate config serves.
	leaf *x509.Certificate
}

// stamp identifies one version of a file without reading it; a nil info
// means the file could not be stat'ed.
type stamp struct{ info os.FileInfo }

func (a stamp) equal(b stamp) bool {
	if a.info == nil || b.info == nil {
		return a.info == nil && b.info == nil
	}
	return os.SameFile(a.info, b.info) && a.info.Size() == b.info.Size() && a.info.ModTime().Equal(b.info.ModTime())
}

// New reads the files and returns a Server serving them. It fails if they
// do not load.
func New(opts Options) (*Server, error) {
	if opts.CertFile == "" || opts.KeyFile == "" {
		return nil, errors.New("tlsfiles: both a certificate file and a key file are required")
	}
	if opts.ClientSAN != "" && opts.ClientCAFile == "" {
		return nil, ErrSANWithoutCA
	}
	s := &Server{opts: opts, log: opts.Logger, now: opts.Now}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.now == nil {
		s.now = time.Now
	}
	checked := s.now()
	stamps := s.stat()
	contents, err := s.read()
	if err != nil {
		return nil, err
	}
	cfg, leaf, err := s.build(contents)
	if err != nil {
		return nil, err
	}
	s.cur.Store(&state{stamps: stamps, racy: racy(stamps, checked), contents: contents, config: cfg, leaf: leaf})
	return s, nil
}

// TLSConfig returns a server configuration that hands every handshake the
// configuration built from the current files.
func (s *Server) TLSConfig() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, GetConfigForClient: s.configForClient}
}

// Leaf returns the certificate being served.
func (s *Server) Leaf() *x509.Certificate { return s.cur.Load().leaf }

func (s *Server) configForClient(*tls.ClientHelloInfo) (*tls.Config, error) {
	st := s.cur.Load()
	if !st.racy && equalStamps(s.stat(), st.stamps) {
		return st.config, nil
	}
	return s.reload().config, nil
}

// reload reads the files again if they changed and returns the state that
// results: a new configuration, or the last good one.
func (s *Server) reload() *state {
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.cur.Load()
	checked := s.now()
	stamps := s.stat() // before reading, so a change after it is seen next time
	if !old.racy && equalStamps(stamps, old.stamps) {
		return old // another handshake reloaded first
	}
	next := *old
	next.stamps, next.racy = stamps, racy(stamps, checked)
	contents, err := s.read()
	if err == nil && equalContents(contents, old.contents) {
		s.cur.Store(&next)
		return &next
	}
	if err == nil {
		next.contents = contents
		var cfg *tls.Config
		var leaf *x509.Certificate
		if cfg, leaf, err = s.build(contents); err == nil {
			next.config, next.leaf = cfg, leaf
			s.log.Info("TLS files reloaded", "cert", s.opts.CertFile, "serial", leaf.SerialNumber.Text(16),
				"not_after", leaf.NotAfter.UTC().Format(time.RFC3339))
		}
	}
	if err != nil {
		s.log.Error("TLS files changed but do not load; serving the previous certificate",
			"cert", s.opts.CertFile, "serial", old.leaf.SerialNumber.Text(16), "error", err)
	}
	s.cur.Store(&next)
	return &next
}

// paths returns the files in a fixed order: certificate, key, client CA.
func (s *Server) paths() []string {
	if s.opts.ClientCAFile == "" {
		return []string{s.opts.CertFile, s.opts.KeyFile}
	}
	return []string{s.opts.CertFile, s.opts.KeyFile, s.opts.ClientCAFile}
}

func (s *Server) stat() []stamp {
	paths := s.paths()
	stamps := make([]stamp, len(paths))
	for i, p := range paths {
		if info, err := os.Stat(p); err == nil {
			stamps[i] = stamp{info}
		}
	}
	return stamps
}

func (s *Server) read() ([][]byte, error) {
	paths := s.paths()
	contents := make([][]byte, len(paths))
	for i, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("tlsfiles: %w", err) // names the path
		}
		contents[i] = data
	}
	return contents, nil
}

// build returns the configuration of one handshake from the files'
// contents, and its leaf certificate.
func (s *Server) build(contents [][]byte) (*tls.Config, *x509.Certificate, error) {
	cert, err := tls.X509KeyPair(contents[0], contents[1])
	if err != nil {
		// The error names no key material.
		return nil, nil, fmt.Errorf("tlsfiles: loading %s and %s: %w", s.opts.CertFile, s.opts.KeyFile, err)
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}
	if s.opts.ClientCAFile != "" {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(contents[2]) {
			return nil, nil, fmt.Errorf("tlsfiles: loading %s: %w", s.opts.ClientCAFile, ErrNoClientCA)
		}
		cfg.ClientCAs, cfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	if san := s.opts.ClientSAN; san != "" {
		cfg.VerifyConnection = func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 || !HasSAN(cs.PeerCertificates[0], san) {
				return fmt.Errorf("%w %q", ErrClientSAN, san)
			}
			return nil
		}
	}
	return cfg, cert.Leaf, nil
}

// HasSAN reports whether cert carries san as a DNS name or IP address (as
// x509 matches host names) or as a URI.
func HasSAN(cert *x509.Certificate, san string) bool {
	if cert.VerifyHostname(san) == nil {
		return true
	}
	for _, u := range cert.URIs {
		if u.String() == san {
			return true
		}
	}
	return false
}

// racy reports whether a file was modified so shortly before checked that
// a later change could keep its modification time.
func racy(stamps []stamp, checked time.Time) bool {
	for _, st := range stamps {
		if st.info != nil && st.info.ModTime().After(checked.Add(-RacyWindow)) {
			return true
		}
	}
	return false
}

func equalStamps(a, b []stamp) bool {
	for i := range a {
		if !a[i].equal(b[i]) {
			return false
		}
	}
	return len(a) == len(b)
}

func equalContents(a, b [][]byte) bool {
	for i := range a {
		if !bytes.Equal(a[i], b[i]) {
			return false
		}
	}
	return len(a) == len(b)
}
