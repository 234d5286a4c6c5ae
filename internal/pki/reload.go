package pki

import (
	"crypto/tls"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// keyPair is a certificate and key read from files and read again when
// the certificate file changes (a renewal: hoard up's, or the operator's
// issuer's), checked at every handshake: two stat calls, next to a
// handshake's signatures. A file that cannot be read back (a cachelet's
// key, removed once it serves) keeps the pair loaded last.
type keyPair struct {
	cert, key string

	mu      sync.Mutex
	pair    *tls.Certificate
	modTime time.Time
	size    int64
}

func loadKeyPair(cert, key string) (*keyPair, error) {
	kp := &keyPair{cert: cert, key: key}
	if _, err := kp.get(); err != nil {
		return nil, err
	}
	return kp, nil
}

// get returns the current pair, reading the files again if the
// certificate file changed since they were read.
func (kp *keyPair) get() (*tls.Certificate, error) {
	kp.mu.Lock()
	defer kp.mu.Unlock()
	fi, err := os.Stat(kp.cert)
	if err != nil || (kp.pair != nil && fi.ModTime().Equal(kp.modTime) && fi.Size() == kp.size) {
		if kp.pair == nil {
			return nil, fmt.Errorf("pki: key pair: %w", err)
		}
		return kp.pair, nil
	}
	pair, err := tls.LoadX509KeyPair(kp.cert, kp.key)
	if err != nil {
		if kp.pair != nil {
			return kp.pair, nil // mid-renewal or removed: the last good pair
		}
		return nil, fmt.Errorf("pki: key pair: %w", err)
	}
	kp.pair, kp.modTime, kp.size = &pair, fi.ModTime(), fi.Size()
	return kp.pair, nil
}

// FileIssuer is a CA in a directory (LoadCA's ca.crt and ca.key) read
// again when its certificate file changes: an operator's issuing CA that
// cert-manager or another tool renews in place, as Kubernetes updates a
// mounted Secret. Certificates already issued keep chaining to the CA
// that issued them; the next IssueIn uses the new one (IssueIn reissues
// what no longer chains to it). Its methods are safe for concurrent use.
type FileIssuer struct {
	dir string
	now func() time.Time

	mu      sync.Mutex
	ca      *CA
	modTime time.Time
	size    int64
}

// OpenIssuer loads the CA in dir (LoadCA); now nil means time.Now.
func OpenIssuer(dir string, now func() time.Time) (*FileIssuer, error) {
	i := &FileIssuer{dir: dir, now: now}
	if _, err := i.current(); err != nil {
		return nil, err
	}
	return i, nil
}

// current returns the CA, loaded again if its certificate file changed
// since it was loaded; a file that cannot be loaded (mid-update) keeps
// the CA loaded last.
func (i *FileIssuer) current() (*CA, error) {
	i.mu.Lock()
	defer i.mu.Unlock()
	fi, err := os.Stat(filepath.Join(i.dir, CACertFile))
	if err != nil || (i.ca != nil && fi.ModTime().Equal(i.modTime) && fi.Size() == i.size) {
		if i.ca == nil {
			return nil, fmt.Errorf("pki: CA in %s: %w", i.dir, err)
		}
		return i.ca, nil
	}
	ca, err := LoadCA(i.dir, i.now)
	if err != nil {
		if i.ca != nil {
			return i.ca, nil
		}
		return nil, err
	}
	i.ca, i.modTime, i.size = ca, fi.ModTime(), fi.Size()
	return ca, nil
}

// IssueIn is the current CA's IssueIn.
func (i *FileIssuer) IssueIn(dir, name string, req Request) (Files, error) {
	ca, err := i.current()
	if err != nil {
		return Files{}, err
	}
	return ca.IssueIn(dir, name, req)
}
