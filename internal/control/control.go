// Package control is the contract between a node agent and the cachelets
// of its instances, apart from the protocol the cachelets speak among
// themselves (package peer): the configuration handed to `hoard serve` as
// one document (Document), and a small HTTP API the cachelet serves on a
// Unix socket in its instance's private directory, for its agent alone.
//
// The API: GET /v1/ready (where the cachelet serves; any answer means it
// is serving and joined to its ring), GET /v1/config (the cache settings
// it applied, the document's less what flags overrode), GET /v1/stats (read and write
// counters, cache occupancy), POST /v1/drop (drop cached objects under a
// prefix), POST /v1/prewarm (fetch owned keys into memory), POST
// /v1/budget (move the memory tier's budget), POST /v1/admission (whether
// the running function's misses are kept) and GET /v1/access (access
// metadata, for pre-warming). Every request carries the instance's control
// token as a bearer token; request bodies are bounded (MaxRequestBytes),
// answers too (the client reads at most MaxResponseBytes), and every
// client call has a deadline. docs/adr/0012-control-api.md says why.
package control

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/hoard-io/hoard/internal/admission"
	"github.com/hoard-io/hoard/internal/cacheconfig"
	"github.com/hoard-io/hoard/internal/erasure"
	"github.com/hoard-io/hoard/internal/grant"
	"github.com/hoard-io/hoard/internal/prewarm"
)

// Bounds of the API.
const (
	// MaxRequestBytes bounds a request body; a larger one is refused with
	// 413 (ErrTooLarge).
	MaxRequestBytes = 1 << 20
	// MaxResponseBytes bounds what the client reads of an answer: access
	// metadata of MaxAccessObjects objects fits with room to spare.
	MaxResponseBytes = 32 << 20
	// MaxPrewarmKeys bounds the keys of one pre-warm request.
	MaxPrewarmKeys = 1000
	// MinTokenLen is the shortest control token a listener accepts.
	MinTokenLen = 32
	// MaxDocumentBytes bounds a configuration document.
	MaxDocumentBytes = 1 << 20
)

// DocumentVersion is the version of Document this package writes and
// reads.
const DocumentVersion = 1

// Document is a cachelet's whole configuration, the one document a node
// agent hands `hoard serve --config`: where it listens, whom it serves,
// its application and ring, its store, its cache settings, and how its
// agent reaches it. It holds secrets, so it travels only in a file of
// mode 0600 inside the instance's private directory (0700), which the
// agent removes once the cachelet is serving; never on a command line or
// in an environment variable.
type Document struct {
	// Version is DocumentVersion.
	Version int `json:"version"`
	// App and ID: the application whose ring the cachelet joins, and its
	// member ID there.
	App string `json:"app"`
	ID  string `json:"id"`
	// Node names the agent's machine (erasure-coded shards go to
	// distinct nodes first). Optional.
	Node string `json:"node,omitempty"`
	// Region clients sign for; default us-east-1.
	Region string `json:"region,omitempty"`
	// Listen, MetricsListen and PeerListen are the listeners' addresses;
	// default 127.0.0.1:0 each.
	Listen        string `json:"listen,omitempty"`
	MetricsListen string `json:"metrics_listen,omitempty"`
	PeerListen    string `json:"peer_listen,omitempty"`
	// S3ListenFD, when 3 or more, is a listening socket the cachelet
	// inherits open and serves S3 on besides Listen: the one its agent
	// made inside the function's network namespace (docs/security.md).
	S3ListenFD int `json:"s3_listen_fd,omitempty"`
	// EtcdEndpoints hold the application's membership; empty: a cachelet
	// on its own.
	EtcdEndpoints []string `json:"etcd_endpoints,omitempty"`
	// EtcdUsername and EtcdPassword sign the membership client in where
	// etcd has authentication on: the instance's own user, which may read
	// its application's ring and write only its own member key.
	EtcdUsername string `json:"etcd_username,omitempty"`
	EtcdPassword string `json:"etcd_password,omitempty"`
	// AccessKey and SecretKey are what the instance's clients (its
	// function) sign with.
	AccessKey string `json:"access_key"`
	SecretKey string `json:"secret_key"`
	// PeerSecret is the application's peer secret (at least 16 bytes),
	// with EtcdEndpoints.
	PeerSecret string `json:"peer_secret,omitempty"`
	// Store is how the cachelet reaches the store: in the platform, with
	// the application's own store identity, never the store's root keys.
	Store Store `json:"store"`
	// Grants are the buckets the application may reach; the cachelet
	// refuses every other. Absent: every bucket (a standalone cachelet);
	// present with no buckets: none.
	Grants *grant.Set `json:"grants,omitempty"`
	// NotifyURL and NotifyToken: where cache triggers are posted.
	NotifyURL   string `json:"notify_url,omitempty"`
	NotifyToken string `json:"notify_token,omitempty"`
	// PlatformURL and PlatformToken: the application's resource on the
	// controller, for the bandwidth policy.
	PlatformURL   string `json:"platform_url,omitempty"`
	PlatformToken string `json:"platform_token,omitempty"`
	// Bandwidth turns the bandwidth policy on.
	Bandwidth bool `json:"bandwidth,omitempty"`
	// TLS, when set, puts the cachelet on TLS (ADR 0017): its S3 and peer
	// listeners, and its calls to peers, etcd and the controller.
	TLS *TLSFiles `json:"tls,omitempty"`
	// Cache is the cache's settings, as the application's spec asks.
	Cache cacheconfig.Settings `json:"cache"`
	// Disk is the node's disk tier for the application, as the agent's
	// per-node setting says; absent: memory only.
	Disk *Disk `json:"disk,omitempty"`
	// Control is where and how the agent reaches the cachelet.
	Control Endpoint `json:"control"`
	// DrainLog makes the run a drain of instance ID's durable log
	// (instance.DrainLog): it delivers the writes of a cachelet that
	// died to the store and exits, 0 once the log is empty. No listener,
	// no ring, no control API.
	DrainLog bool `json:"drain_log,omitempty"`
	// LogLevel (debug, info, warn, error) and LogJSON shape the log.
	LogLevel string `json:"log_level,omitempty"`
	LogJSON  bool   `json:"log_json,omitempty"`
}

// Disk is a cachelet's disk tier (package disktier): the application's
// directory on the node, shared by its instances there, and its limits.
// Zero values take disktier's defaults.
type Disk struct {
	Dir           string               `json:"dir"`
	Budget        int64                `json:"budget"`
	MinObjectSize int64                `json:"min_object_size,omitempty"`
	MaxAge        cacheconfig.Duration `json:"max_age,omitempty"`
	Fsync         bool                 `json:"fsync,omitempty"`
	// Group shares the files with the directory's group: the
	// application's other instances, which run as uids of their own.
	Group bool `json:"group,omitempty"`
	// DirFD, when 3 or more, is the directory inherited open: a cachelet
	// running as a uid of its own cannot walk the agent's private
	// directories to Dir, and reaches it through /proc/self/fd instead.
	DirFD int `json:"dir_fd,omitempty"`
}

// Store is the store's endpoint and credentials.
type Store struct {
	Endpoint  string `json:"endpoint"`
	Region    string `json:"region,omitempty"`
	AccessKey string `json:"access_key"`
	SecretKey string `json:"secret_key"`
}

// TLSFiles are the paths of a cachelet's TLS files. The key is not in the
// document: it is a file of its own, 0600 and readable by the cachelet
// alone, which its agent removes with the document once the cachelet is
// serving (the cachelet holds it in memory by then).
type TLSFiles struct {
	// Cert is the cachelet's certificate (identity: its application and
	// id; hosts: its listeners' addresses), served on the S3 and peer
	// listeners and presented to peers, etcd and the controller.
	Cert string `json:"cert"`
	// Key is the certificate's key.
	Key string `json:"key"`
	// CA is the platform's CA bundle: peers, etcd and the controller must
	// present certificates chaining to it.
	CA string `json:"ca"`
}

// Endpoint is a control listener: a Unix socket path and the token its
// caller must present.
type Endpoint struct {
	Socket string `json:"socket"`
	Token  string `json:"token"`
}

// ErrInvalidDocument marks every Document error.
var ErrInvalidDocument = errors.New("invalid cachelet configuration document")

// Validate checks the document without changing it.
func (d *Document) Validate() error {
	if d.Version != DocumentVersion {
		return fmt.Errorf("%w: version %d, want %d", ErrInvalidDocument, d.Version, DocumentVersion)
	}
	if err := d.Cache.Validate(); err != nil {
		return fmt.Errorf("%w: cache: %v", ErrInvalidDocument, err)
	}
	if d.Grants != nil {
		if err := grant.Validate(d.Grants.Buckets); err != nil {
			return fmt.Errorf("%w: grants: %v", ErrInvalidDocument, err)
		}
	}
	if t := d.TLS; t != nil && (t.Cert == "" || t.Key == "" || t.CA == "") {
		return fmt.Errorf("%w: tls needs a certificate, a key and a CA", ErrInvalidDocument)
	}
	if (d.Control.Socket == "") != (d.Control.Token == "") {
		return fmt.Errorf("%w: control needs both a socket and a token", ErrInvalidDocument)
	}
	if d.Control.Token != "" && len(d.Control.Token) < MinTokenLen {
		return fmt.Errorf("%w: the control token is shorter than %d bytes", ErrInvalidDocument, MinTokenLen)
	}
	return nil
}

// ParseDocument reads a document from its JSON form, strictly (unknown
// fields are errors), and checks it.
func ParseDocument(data []byte) (*Document, error) {
	if len(data) > MaxDocumentBytes {
		return nil, fmt.Errorf("%w: larger than %d bytes", ErrInvalidDocument, MaxDocumentBytes)
	}
	var d Document
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&d); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidDocument, err)
	}
	if err := d.Validate(); err != nil {
		return nil, err
	}
	return &d, nil
}

// ReadDocument reads and checks the document at path. It refuses a file
// that other users may read: the document holds secrets.
func ReadDocument(path string) (*Document, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("%w: %s has mode %v; it holds secrets, so it must be 0600", ErrInvalidDocument, path, fi.Mode().Perm())
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxDocumentBytes+1))
	if err != nil {
		return nil, err
	}
	return ParseDocument(data)
}

// WriteDocument writes d to path with mode 0600, whole or not at all
// (a reader sees no file or the complete document).
func WriteDocument(path string, d *Document) error {
	data, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		return err
	}
	return WriteFileAtomic(path, append(data, '\n'), 0o600)
}

// WriteFileAtomic writes data to path with mode perm through a temporary
// file in the same directory and a rename, so a reader sees no file or
// all of it, never part.
func WriteFileAtomic(path string, data []byte, perm os.FileMode) (err error) {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			os.Remove(tmp.Name())
		}
	}()
	if err = tmp.Chmod(perm); err != nil {
		tmp.Close()
		return err
	}
	if _, err = tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err = tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// NewToken returns a fresh random control token (64 hex digits).
func NewToken() string {
	var b [32]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on Linux
	return hex.EncodeToString(b[:])
}

// Ready says where a serving cachelet is. It is the answer to GET
// /v1/ready and the content of `hoard serve --ready-file`.
type Ready struct {
	// ID is the cachelet's member ID (its configured one, or the one
	// generated).
	ID  string `json:"id"`
	App string `json:"app"`
	// Endpoint is the S3 endpoint, "http://127.0.0.1:PORT".
	Endpoint string `json:"endpoint"`
	// MetricsURL is ".../metrics" on the metrics listener; "" with the
	// metrics listener off.
	MetricsURL string `json:"metrics_url"`
	// PeerAddr is the host:port of the peer protocol, "" for a cachelet
	// on its own.
	PeerAddr string `json:"peer_addr"`
	PID      int    `json:"pid"`
}

// Stats is the answer to GET /v1/stats: what the cachelet has served
// since it started (the counters only grow) and its cache's occupancy now.
type Stats struct {
	// Reads by how they were served: local_hit, local_miss, remote_hit,
	// remote_miss, pass_through, disk_hit.
	Reads map[string]ReadCount `json:"reads"`
	// Writes counts objects written by the cachelet's clients.
	Writes       int64 `json:"writes"`
	CacheBytes   int64 `json:"cache_bytes"`
	CacheObjects int64 `json:"cache_objects"`
	BudgetBytes  int64 `json:"budget_bytes"`
	// EvictedAgain counts evictions of owned objects evicted before (the
	// cache-size scaling policy's signal).
	EvictedAgain int64 `json:"evicted_again"`
	// Erasure is the erasure-coded path's figures; nil when it is off.
	Erasure *erasure.Health `json:"erasure,omitempty"`
	// NotAdmitted counts misses served without keeping a copy (POST
	// /v1/admission); they are pass_through reads too. Admitting is the
	// setting now.
	NotAdmitted int64 `json:"not_admitted"`
	Admitting   bool  `json:"admitting"`
	// WriteNanos is the time the clients' acknowledged writes took.
	WriteNanos int64 `json:"write_nanos"`
	// StoreFit holds the whole-object reads the store served, size
	// against time: what reads would cost without a cache.
	StoreFit admission.StoreFit `json:"store_fit"`
}

// ReadCount is how many reads of one kind ended, the bytes they sent and
// the time they took, request to the body's close.
type ReadCount struct {
	Count int64 `json:"count"`
	Bytes int64 `json:"bytes"`
	Nanos int64 `json:"nanos"`
}

// AdmissionRequest is the body of POST /v1/admission: whether the misses
// of the function about to run are kept (false: served from the store
// without keeping a copy).
type AdmissionRequest struct {
	Admit *bool `json:"admit"`
}

// Sub returns the reads in s that are not in before, by kind, leaving out
// kinds with none: one invocation's reads, from the snapshots around it.
func (s Stats) Sub(before Stats) map[string]ReadCount {
	out := map[string]ReadCount{}
	for k, v := range s.Reads {
		b := before.Reads[k]
		d := ReadCount{Count: v.Count - b.Count, Bytes: v.Bytes - b.Bytes, Nanos: v.Nanos - b.Nanos}
		if d.Count != 0 || d.Bytes != 0 {
			out[k] = d
		}
	}
	return out
}

// Key names an object.
type Key struct {
	Bucket string `json:"bucket"`
	Key    string `json:"key"`
}

// DropRequest is the body of POST /v1/drop: drop the cached copies of
// Bucket's objects whose keys start with Prefix (empty: all of them).
type DropRequest struct {
	Bucket string `json:"bucket"`
	Prefix string `json:"prefix"`
}

// DropResult is the answer to a drop: how many cached objects went.
type DropResult struct {
	Dropped int `json:"dropped"`
}

// PrewarmRequest is the body of POST /v1/prewarm.
type PrewarmRequest struct {
	Keys []Key `json:"keys"`
}

// PrewarmResult is what a pre-warm request did: of the keys sent, how many
// the cachelet owns, already held, fetched (with their bytes), skipped as
// too large for memory, and failed to fetch.
type PrewarmResult struct {
	Owned   int   `json:"owned"`
	Cached  int   `json:"cached"`
	Fetched int   `json:"fetched"`
	Bytes   int64 `json:"bytes"`
	Skipped int   `json:"skipped"`
	Failed  int   `json:"failed"`
}

// BudgetRequest is the body of POST /v1/budget.
type BudgetRequest struct {
	Bytes int64 `json:"bytes"`
}

// BudgetResult is the answer to a budget change: the budget now, the bytes
// of the cached objects evicted to fit it, and what the cache holds after:
// complete objects, and reservations of fills in flight.
type BudgetResult struct {
	Budget        int64 `json:"budget"`
	Freed         int64 `json:"freed"`
	CacheBytes    int64 `json:"cache_bytes"`
	ReservedBytes int64 `json:"reserved_bytes"`
}

// AccessMetadata is the answer to GET /v1/access.
type AccessMetadata struct {
	Objects []prewarm.Object `json:"objects"`
}
