package pki

import (
	"crypto/tls"
	"fmt"
	"os"
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
