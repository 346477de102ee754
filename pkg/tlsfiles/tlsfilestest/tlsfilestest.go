// Package tlsfilestest makes certificate authorities and certificates at
// test time, for tests of TLS servers and clients. Keys are ECDSA P-256;
// every certificate gets a fresh random serial number.
package tlsfilestest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// CA is a certificate authority that issues certificates.
type CA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	// PEM is the CA certificate in PEM form.
	PEM []byte
}

// Cert is an issued certificate with its key, both in PEM form.
type Cert struct {
	CertPEM, KeyPEM []byte
	// Serial is the certificate's serial number.
	Serial *big.Int
}

// Names are the subject alternative names of a certificate.
type Names struct {
	DNS  []string
	IPs  []net.IP
	URIs []string
}

// Mutual is the files of a mutual TLS test: a server certificate, the CA
// that signs it, and the CA that signs the clients'.
type Mutual struct {
	// CertFile and KeyFile are the server's certificate and key.
	CertFile, KeyFile string
	// CAFile holds the server CA's certificate, for clients to trust.
	CAFile string
	// ClientCAFile holds ClientCA's certificate, for the server to trust.
	ClientCAFile string
	// ClientCA signs client certificates (ClientFiles).
	ClientCA *CA
	dir      string
}

// NewMutual writes into dir a server certificate for serverName, its CA's
// certificate and a client CA's certificate.
func NewMutual(t testing.TB, dir, serverName string) *Mutual {
	t.Helper()
	serverCA := NewCA(t, "server CA")
	m := &Mutual{ClientCA: NewCA(t, "client CA"), dir: dir,
		CAFile: filepath.Join(dir, "server-ca.crt"), ClientCAFile: filepath.Join(dir, "client-ca.crt")}
	m.CertFile, m.KeyFile = serverCA.Server(t, Names{DNS: []string{serverName}}).Write(t, dir)
	WriteFile(t, m.CAFile, serverCA.PEM)
	WriteFile(t, m.ClientCAFile, m.ClientCA.PEM)
	return m
}

// ClientFiles writes a client certificate carrying the DNS name name,
// signed by m.ClientCA, and returns its certificate and key files.
func (m *Mutual) ClientFiles(t testing.TB, name string) (certFile, keyFile string) {
	t.Helper()
	dir := filepath.Join(m.dir, "client-"+name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	return m.ClientCA.Client(t, Names{DNS: []string{name}}).Write(t, dir)
}

// NewCA returns a new self-signed CA named name.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber:          serial(t),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &CA{cert: cert, key: key, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// Server issues a server certificate for names.
func (ca *CA) Server(t testing.TB, names Names) Cert {
	t.Helper()
	return ca.issue(t, names, x509.ExtKeyUsageServerAuth)
}

// Client issues a client certificate with names.
func (ca *CA) Client(t testing.TB, names Names) Cert {
	t.Helper()
	return ca.issue(t, names, x509.ExtKeyUsageClientAuth)
}

func (ca *CA) issue(t testing.TB, names Names, usage x509.ExtKeyUsage) Cert {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: serial(t),
		Subject:      pkix.Name{CommonName: "tollgate test"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		DNSNames:     names.DNS,
		IPAddresses:  names.IPs,
	}
	for _, s := range names.URIs {
		u, err := url.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		tmpl.URIs = append(tmpl.URIs, u)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return Cert{
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
		Serial:  tmpl.SerialNumber,
	}
}

// Write writes the certificate and key to dir as tls.crt and tls.key and
// returns their paths.
func (c Cert) Write(t testing.TB, dir string) (certFile, keyFile string) {
	t.Helper()
	certFile, keyFile = filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	WriteFile(t, certFile, c.CertPEM)
	WriteFile(t, keyFile, c.KeyPEM)
	return certFile, keyFile
}

// WriteFile writes data to path, failing the test on an error.
func WriteFile(t testing.TB, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// SecretDir lays files out in dir as Kubernetes mounts a Secret: each
// file's name is a symlink into "..data", itself a symlink to a hidden
// timestamped directory that holds the files.
type SecretDir struct {
	Dir     string
	version int
}

// NewSecretDir mounts files (name to contents) in dir, as Kubernetes does.
func NewSecretDir(t testing.TB, dir string, files map[string][]byte) *SecretDir {
	t.Helper()
	d := &SecretDir{Dir: dir}
	d.Update(t, files)
	for name := range files {
		if err := os.Symlink(filepath.Join("..data", name), filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

// Update replaces every file at once, as Kubernetes does: it writes them to
// a new hidden directory and swaps the "..data" symlink to it by a rename.
func (d *SecretDir) Update(t testing.TB, files map[string][]byte) {
	t.Helper()
	d.version++
	version := filepath.Join(d.Dir, ".."+time.Now().Format("2006_01_02_15_04_05.")+strconv.Itoa(d.version))
	if err := os.Mkdir(version, 0o700); err != nil {
		t.Fatal(err)
	}
	for name, data := range files {
		WriteFile(t, filepath.Join(version, name), data)
	}
	tmp := filepath.Join(d.Dir, "..data_tmp")
	if err := os.Symlink(filepath.Base(version), tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(d.Dir, "..data")); err != nil {
		t.Fatal(err)
	}
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

func serial(t testing.TB) *big.Int {
	t.Helper()
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		t.Fatal(err)
	}
	return n
}
