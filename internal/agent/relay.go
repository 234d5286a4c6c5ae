package agent

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hoard-io/hoard/internal/api"
	"github.com/hoard-io/hoard/internal/appspec"
	"github.com/hoard-io/hoard/internal/pki"
	"github.com/hoard-io/hoard/internal/store"
)

// Relaying a lazily read package down the application's function tree
// (FaaSNet §3, ADR 0027): an agent fetches the package object's bytes
// from its parent agent (StartRequest.Parent), which serves them from
// what it has fetched, fetching what it lacks from its own parent or the
// store; the tree's root fetches from the store. Every block is verified
// by the reading agent's blockfmt.Reader against the index whose digest
// the controller recorded, so a parent's bytes are trusted no more than
// the store's: a block that does not verify makes the agent distrust its
// parent, forget what came from it, and read again from the store.

// treeChain is where a start request says to fetch its package from:
// the parent, then its ancestors (relay.go).
func treeChain(req api.StartRequest) []api.Registration {
	if req.Parent == nil {
		return nil
	}
	return append([]api.Registration{*req.Parent}, req.Ancestors...)
}

// maxRelayFetch bounds one request to a parent (the Reader asks for at
// most 8 MiB at a time, 12 MiB for the largest blocks).
const maxRelayFetch = 16 << 20

// relayTimeout bounds one call to a parent.
const relayTimeout = 30 * time.Second

type span struct{ off, end int64 }

// blockSum is one block's place in the package and the SHA-256 of its
// stored bytes (appspec.Package.BlockSums).
type blockSum struct {
	off, end int64
	sum      [sha256.Size]byte
}

// maxSumsBytes bounds a package's block sums: the controller refuses a
// package with more (appspec.MaxBlockSumsBytes).
const maxSumsBytes = appspec.MaxBlockSumsBytes

// loadSums reads and checks a package's block sums from the store.
func (a *Agent) loadSums(ctx context.Context, ref api.PackageRef, size int64) ([]blockSum, error) {
	if len(ref.SumsSHA256) != 64 {
		return nil, errors.New("the package has no block sums")
	}
	body, _, _, err := a.cfg.Store.Get(ctx, ref.Bucket, ref.Key+".sums", store.GetOptions{})
	if err != nil {
		return nil, err
	}
	defer body.Close()
	raw, err := io.ReadAll(io.LimitReader(body, maxSumsBytes+1))
	if err != nil {
		return nil, err
	}
	if h := sha256.Sum256(raw); hex.EncodeToString(h[:]) != ref.SumsSHA256 || len(raw) > maxSumsBytes || len(raw)%appspec.BlockSumLen != 0 {
		return nil, errors.New("the package's block sums do not match their digest")
	}
	out := make([]blockSum, 0, len(raw)/appspec.BlockSumLen)
	var last int64
	for b := raw; len(b) > 0; b = b[appspec.BlockSumLen:] {
		bs := blockSum{off: int64(binary.BigEndian.Uint64(b)), end: int64(binary.BigEndian.Uint64(b)) + int64(binary.BigEndian.Uint32(b[8:]))}
		copy(bs.sum[:], b[12:appspec.BlockSumLen])
		if bs.off < last || bs.end <= bs.off || bs.end > size {
			return nil, errors.New("the package's block sums are malformed")
		}
		last = bs.end
		out = append(out, bs)
	}
	return out, nil
}

// relaySource is one package object's bytes for a lazy mount, kept in a
// local sparse file as they arrive.
type relaySource struct {
	a           *Agent
	sha         string
	bucket, key string
	etag        string
	sumsSHA     string // the block sums' digest (PackageRef.SumsSHA256)
	size        int64
	parents     []api.Registration // the parent, then its ancestors; nil: the store
	sums        []blockSum         // checks the parents' bytes; nil without parents
	created     time.Time
	file        *os.File

	mu         sync.Mutex
	have       []span // sorted, disjoint, what the file holds
	cur        int    // the parent asked now: parents[cur]
	parentBad  bool   // every parent given up: the store only
	parentData bool   // some of have came from the parent
	app        string // whose tree this package is relayed down
	failed     map[string]bool
	detached   bool      // a parent failed: the tree is followed (treefollow.go)
	treeRead   time.Time // when the tree was last read

	fetchMu               sync.Mutex // one upstream fetch at a time
	fromParent, fromStore atomic.Int64
	rejected              atomic.Int64

	// progress is closed, and replaced, whenever have grows: what waits
	// for bytes (pushed blocks, a child's stream) waits on it. Under mu.
	progress chan struct{}
	// whole is when the file first held the whole package (wholeLocked);
	// zero until then, and again after distrust forgot the parent's
	// bytes. Under mu.
	whole time.Time
	// pushing: a stream of the parent's blocks is being received
	// (pushdown.go); stop ends it.
	pushing  bool
	stop     context.CancelFunc
	pushDone chan struct{} // closed when the stream's reader ended
	pushed   atomic.Int64  // bytes received pushed from the parent
	// aheadStop ends the fetch ahead (fetchahead.go); aheadDone is
	// closed when it has ended. Under mu.
	aheadStop context.CancelFunc
	aheadDone chan struct{}
	// aheadBad: a block fetched ahead did not match its SHA-256; the
	// package is never counted whole. aheadChecking: the fetch ahead
	// runs and has not checked every block yet; the package is counted
	// whole once it has. Under mu.
	aheadBad, aheadChecking bool
}

func (a *Agent) newRelaySource(ctx context.Context, ref api.PackageRef, parents []api.Registration, path string) (*relaySource, error) {
	info, err := a.cfg.Store.Stat(ctx, ref.Bucket, ref.Key)
	if err != nil {
		return nil, fmt.Errorf("the code package %s/%s: %w", ref.Bucket, ref.Key, err)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := f.Truncate(info.Size); err != nil {
		f.Close()
		return nil, err
	}
	parents = slices.DeleteFunc(slices.Clone(parents), func(r api.Registration) bool { return r.ID == a.cfg.ID || r.URL == "" })
	if a.cfg.NoCodeRelay {
		parents = nil
	}
	var sums []blockSum
	if len(parents) > 0 {
		// Blocks from another agent are kept only when they match their
		// SHA-256: without the sums, the store it is.
		if sums, err = a.loadSums(ctx, ref, info.Size); err != nil {
			a.log.Warn("not fetching the package from other agents", "package", ref.SHA256, "parent", parents[0].ID, "err", err)
			parents = nil
		}
	}
	return &relaySource{a: a, sha: ref.SHA256, sumsSHA: ref.SumsSHA256, bucket: ref.Bucket, key: ref.Key, etag: info.ETag, size: info.Size,
		parents: parents, sums: sums, file: f, created: time.Now(), app: appOfKey(ref.Key), progress: make(chan struct{})}, nil
}

func (s *relaySource) covered(off, end int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.coveredLocked(off, end)
}

// coveredLocked: the file holds [off, end); under mu.
func (s *relaySource) coveredLocked(off, end int64) bool {
	for _, sp := range s.have {
		if sp.off <= off && end <= sp.end {
			return true
		}
	}
	return false
}

func (s *relaySource) add(off, end int64) {
	s.mu.Lock()
	became := s.addLocked(off, end)
	at := s.whole
	s.mu.Unlock()
	if became {
		s.reportWhole(at)
	}
}

// reportWhole counts and logs the package held whole at at.
func (s *relaySource) reportWhole(at time.Time) {
	took := at.Sub(s.created)
	s.a.lazy.whole.Observe(took.Seconds())
	s.a.log.Info("code package held whole", "package", s.sha, "bytes", s.size, "took", took.Round(time.Millisecond),
		"from_parent", s.fromParent.Load(), "from_store", s.fromStore.Load())
}

// addLocked records [off, end) as held and reports whether the file
// now holds the whole package for the first time; under mu.
func (s *relaySource) addLocked(off, end int64) (became bool) {
	s.have = append(s.have, span{off, end})
	slices.SortFunc(s.have, func(a, b span) int { return cmp.Compare(a.off, b.off) })
	merged := s.have[:0]
	for _, sp := range s.have {
		if n := len(merged); n > 0 && sp.off <= merged[n-1].end {
			merged[n-1].end = max(merged[n-1].end, sp.end)
			continue
		}
		merged = append(merged, sp)
	}
	s.have = merged
	close(s.progress)
	s.progress = make(chan struct{})
	return s.markWholeLocked()
}

// markWholeLocked sets whole when the file holds the whole package for
// the first time, and reports whether it did; under mu.
func (s *relaySource) markWholeLocked() bool {
	if s.whole.IsZero() && s.wholeLocked() {
		s.whole = time.Now()
		return true
	}
	return false
}

// wholeLocked reports whether the file holds the whole package: every
// block of the sums (each from a parent matched its SHA-256, and with a
// fetch ahead each from the store too: fetchahead.go) and what
// lies after the last (the index and footer, matched against the
// deploy's digest when the package was opened), or without sums (the
// tree's root before a child asked) every byte. The 16-byte header
// before the first block is no block: a child takes it with block 0's
// reads and checks it against the footer, but does not keep it. Under
// mu.
func (s *relaySource) wholeLocked() bool {
	if s.aheadBad || s.aheadChecking {
		return false
	}
	first := int64(0)
	if len(s.sums) > 0 {
		first = s.sums[0].off
	}
	return s.coveredLocked(first, s.size)
}

// held is how many of the package's bytes the file holds.
func (s *relaySource) held() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var n int64
	for _, sp := range s.have {
		n += sp.end - sp.off
	}
	return n
}

// wholeAt is when the file first held the whole package, zero until
// then.
func (s *relaySource) wholeAt() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.whole
}

// keep writes b, the package's bytes at off, to the local file and
// records them as held.
func (s *relaySource) keep(b []byte, off int64) error {
	if _, err := s.file.WriteAt(b, off); err != nil {
		return err
	}
	s.add(off, off+int64(len(b)))
	return nil
}

// FetchAt is blockfmt.Source: from the local file when it holds the
// range, else from upstream (kept for later reads and for children).
func (s *relaySource) FetchAt(ctx context.Context, p []byte, off int64) error {
	end := off + int64(len(p))
	if off < 0 || end > s.size {
		return fmt.Errorf("range [%d, %d) outside the package's %d bytes", off, end, s.size)
	}
	if len(p) == 0 {
		return nil
	}
	if !s.covered(off, end) {
		// Blocks on their way down from the parent (pushdown.go).
		s.awaitPush(ctx, off, end)
	}
	if !s.covered(off, end) {
		s.fetchMu.Lock()
		defer s.fetchMu.Unlock()
		if !s.covered(off, end) {
			// upstream keeps each block as it arrives, so that a
			// child's stream forwards it at once.
			return s.upstream(ctx, p, off)
		}
	}
	_, err := s.file.ReadAt(p, off)
	return err
}

// upstream fetches p from the parent, or from the store when there is
// none, it failed before, or it fails now (a block that does not match
// its SHA-256 is a failure), keeping what may be kept as it arrives:
// from the store every piece, from a parent every whole block that
// matches its SHA-256 and what lies after the last block.
func (s *relaySource) upstream(ctx context.Context, p []byte, off int64) error {
	s.followTree(ctx, false)
	for {
		s.mu.Lock()
		var parent *api.Registration
		if !s.parentBad && s.cur < len(s.parents) {
			parent = &s.parents[s.cur]
		}
		s.mu.Unlock()
		if parent == nil {
			break
		}
		arr := s.arrival(p, off)
		err := s.fromAgent(ctx, parent, p, off, arr.upto)
		if err == nil {
			err = arr.upto(len(p))
		}
		if err == nil {
			s.fromParent.Add(int64(len(p)))
			s.a.lazy.relayed.WithLabelValues("parent").Add(float64(len(p)))
			return nil
		}
		if errors.Is(err, errLied) {
			// It lied: no agent is trusted again for this package.
			s.a.lazy.rejected.Inc()
			s.rejected.Add(1)
			s.a.log.Warn("a block from another agent does not match the package's block sums; fetching from the store", "package", s.sha, "agent", parent.ID)
			s.mu.Lock()
			s.parentBad = true
			s.mu.Unlock()
			break
		}
		// It failed: the next ancestor up the tree, then the store.
		s.a.log.Warn("an agent above in the function tree failed; trying the next", "package", s.sha, "agent", parent.ID, "err", err)
		s.parentFailed(parent.ID)
		s.followTree(ctx, true)
	}
	body, _, _, err := s.a.cfg.Store.Get(ctx, s.bucket, s.key, store.GetOptions{
		Range: &store.ByteRange{Start: off, End: off + int64(len(p)) - 1}, IfMatch: s.etag,
	})
	if err != nil {
		return err
	}
	defer body.Close()
	for done := 0; done < len(p); {
		n := min(len(p)-done, relayPiece)
		if _, err := io.ReadFull(body, p[done:done+n]); err != nil {
			return fmt.Errorf("%s/%s: %w", s.bucket, s.key, err)
		}
		if err := s.keep(p[done:done+n], off+int64(done)); err != nil {
			return err
		}
		s.fromStore.Add(int64(n))
		s.a.lazy.relayed.WithLabelValues("store").Add(float64(n))
		done += n
	}
	return nil
}

// relayPiece is how much of an upstream answer is read before what it
// completed is kept (and so forwarded to children).
const relayPiece = 128 << 10

// errLied is a parent's block that does not match its SHA-256.
var errLied = errors.New("a block from the parent does not match the package's block sums")

// arrival keeps a parent's answer's whole blocks as they arrive.
type arrival struct {
	s    *relaySource
	p    []byte
	off  int64
	next int // the first block of s.sums not looked at yet
}

func (s *relaySource) arrival(p []byte, off int64) *arrival {
	i, _ := slices.BinarySearchFunc(s.sums, off, func(b blockSum, off int64) int { return cmp.Compare(b.end, off+1) })
	return &arrival{s: s, p: p, off: off, next: i}
}

// upto keeps the whole blocks within the first n bytes of the answer,
// each checked against its SHA-256, and when n is all of it what lies
// after the last block (the index and footer, checked against the
// deploy's digest when the package is opened).
func (a *arrival) upto(n int) error {
	s, end := a.s, a.off+int64(n)
	for ; a.next < len(s.sums) && s.sums[a.next].end <= end; a.next++ {
		b := s.sums[a.next]
		if b.off < a.off {
			continue // partly covered: used by the reader as is (it checks the block's CRC), not kept
		}
		if sha256.Sum256(a.p[b.off-a.off:b.end-a.off]) != b.sum {
			return errLied
		}
		if err := s.keepFromParent(a.p[b.off-a.off:b.end-a.off], b.off); err != nil {
			return err
		}
	}
	if n == len(a.p) && len(s.sums) > 0 {
		if last := s.sums[len(s.sums)-1].end; end > last {
			return s.keepFromParent(a.p[max(a.off, last)-a.off:], max(a.off, last))
		}
	}
	return nil
}

// keepFromParent keeps bytes that came from a parent, unless the
// parents were given up meanwhile.
func (s *relaySource) keepFromParent(b []byte, off int64) error {
	if _, err := s.file.WriteAt(b, off); err != nil {
		return err
	}
	s.mu.Lock()
	bad := s.parentBad
	if !bad {
		s.parentData = true
	}
	s.mu.Unlock()
	if !bad {
		s.add(off, off+int64(len(b)))
	}
	return nil
}

func (s *relaySource) fromAgent(ctx context.Context, parent *api.Registration, p []byte, off int64, got func(int) error) error {
	ctx, cancel := context.WithTimeout(ctx, relayTimeout)
	defer cancel()
	for {
		err := s.askAgent(ctx, parent, p, off, got)
		// The parent was placed at the same time as this agent and has
		// not mounted the package yet: wait for it, for a while.
		if !errors.Is(err, errNotHere) || time.Since(s.created) > relayWait {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// errNotHere is a parent's answer for a package it has not mounted.
var errNotHere = errors.New("the parent has not mounted the package")

// relayWait is how long after its mount an agent waits for a parent
// that has not mounted the package yet (both started at once).
const relayWait = 10 * time.Second

// askAgent reads p from parent, calling got with the bytes read so far
// after each piece.
func (s *relaySource) askAgent(ctx context.Context, parent *api.Registration, p []byte, off int64, got func(int) error) error {
	url := fmt.Sprintf("%s/v1/packages/%s/raw?off=%d&len=%d", parent.URL, s.sha, off, len(p))
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+s.a.peerToken())
	resp, err := s.a.relayClient().Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		return errNotHere
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s answered %s", parent.ID, resp.Status)
	}
	if resp.ContentLength != int64(len(p)) {
		return fmt.Errorf("%s answered %d bytes, want %d", parent.ID, resp.ContentLength, len(p))
	}
	for done := 0; done < len(p); {
		n, err := io.ReadFull(resp.Body, p[done:min(len(p), done+relayPiece)])
		done += n
		if err != nil {
			return err
		}
		if err := got(done); err != nil {
			return err
		}
	}
	return nil
}

// distrust is called when a block did not verify: what came from the
// parent is forgotten and the store serves from now on. It reports
// whether a read is worth retrying: when there is a parent (which may
// have served the bad block; reads that raced this one retry too).
func (s *relaySource) distrust() bool {
	if len(s.parents) == 0 {
		return false
	}
	s.fetchMu.Lock()
	defer s.fetchMu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.parentBad || s.parentData {
		s.a.log.Warn("a block from another agent did not verify; reading the package from the store", "package", s.sha)
	}
	s.parentBad = true
	if s.parentData {
		s.have, s.parentData, s.whole = nil, false, time.Time{}
	}
	return true
}

func (s *relaySource) close() error {
	s.mu.Lock()
	stop, done := s.stop, s.pushDone
	aheadStop, aheadDone := s.aheadStop, s.aheadDone
	s.mu.Unlock()
	if stop != nil {
		stop()
		<-done // the stream's reader ends with its request
	}
	if aheadStop != nil {
		aheadStop()
		<-aheadDone // its fetch ends with its context
	}
	name := s.file.Name()
	return errors.Join(s.file.Close(), os.Remove(name))
}

// relayClient calls parent agents: over TLS with the agent's own
// certificate where the platform runs on TLS (Config.PeerTLS).
func (a *Agent) relayClient() *http.Client {
	a.relayOnce.Do(func() {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.TLSClientConfig = a.cfg.PeerTLS
		a.relayHTTP = &http.Client{Timeout: relayTimeout, Transport: tr}
	})
	return a.relayHTTP
}

// relayCallers keeps other agents, which reach an agent's API over
// mutual TLS with a certificate of their role (ADR 0017), to the relay
// route: everything else stays the controller's.
func relayCallers(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 && r.URL.Path != "/healthz" {
			id, err := pki.IdentityOf(r.TLS.PeerCertificates[0])
			relay := r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/v1/packages/")
			if err != nil || id.Role != pki.RoleController && !(id.Role == pki.RoleAgent && relay) {
				api.WriteError(w, http.StatusForbidden, errors.New("this certificate may not call this route"))
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// peerToken is the bearer token agents call each other with: the one
// their APIs accept (Handler).
func (a *Agent) peerToken() string {
	if t := a.token.Load(); t != nil {
		return *t
	}
	return ""
}

// servePackageRaw answers a child agent's GET
// /v1/packages/{sha}/raw?off=N&len=M with the bytes of a package this
// agent has mounted lazily, fetching what it lacks from upstream.
func (a *Agent) servePackageRaw(w http.ResponseWriter, r *http.Request) {
	if a.cfg.CodeFetch != CodeFetchLazy || a.cfg.NoCodeRelay {
		// Never here: the child turns to the store at once.
		api.WriteError(w, http.StatusNotImplemented, errors.New("this agent does not relay code packages"))
		return
	}
	src := a.relaySourceOf(r.PathValue("sha"))
	if src == nil {
		api.WriteError(w, http.StatusNotFound, errors.New("no such package here"))
		return
	}
	off, err1 := strconv.ParseInt(r.URL.Query().Get("off"), 10, 64)
	n, err2 := strconv.ParseInt(r.URL.Query().Get("len"), 10, 64)
	if err1 != nil || err2 != nil || off < 0 || n <= 0 || n > maxRelayFetch || off+n > src.size {
		api.WriteError(w, http.StatusBadRequest, fmt.Errorf("off and len must name a range of at most %d bytes inside the package's %d", maxRelayFetch, src.size))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), relayTimeout)
	defer cancel()
	// At most maxRelayServing answers (each up to 16 MiB) at once.
	select {
	case a.lazy.serving <- struct{}{}:
		defer func() { <-a.lazy.serving }()
	case <-ctx.Done():
		api.WriteError(w, http.StatusServiceUnavailable, ctx.Err())
		return
	}
	buf := make([]byte, n)
	if err := src.FetchAt(ctx, buf, off); err != nil {
		api.WriteError(w, http.StatusBadGateway, err)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.FormatInt(n, 10))
	w.Write(buf)
}

// maxRelayServing bounds the relay answers an agent makes at once.
const maxRelayServing = 4

func (a *Agent) relaySourceOf(sha string) *relaySource {
	if a.lazy == nil {
		return nil
	}
	a.lazy.mu.Lock()
	defer a.lazy.mu.Unlock()
	if m := a.lazy.mounts[sha]; m != nil {
		return m.src
	}
	return nil
}
