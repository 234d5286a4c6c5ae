package instance

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/hoard-io/hoard/internal/cachelet"
	"github.com/hoard-io/hoard/internal/dashboard"
)

// cacheletState is what the standalone cachelet's dashboard shows (GET
// /dashboard/api/state on the metrics listener, beside /stats).
type cacheletState struct {
	Time     time.Time          `json:"time"`
	App      string             `json:"app,omitempty"`
	ID       string             `json:"id,omitempty"`
	Endpoint string             `json:"endpoint"`
	Counters cachelet.Counters  `json:"counters"`
	Ring     []cacheletRingPart `json:"ring,omitempty"`
}

// cacheletRingPart is a ring member's share of the application's keys.
type cacheletRingPart struct {
	Member string  `json:"member"`
	Share  float64 `json:"share"`
}

// dashboardRoutes serves the cachelet's dashboard on the metrics
// listener's mux: the page under /dashboard/ and its state. The listener
// is loopback by default and serves the same counters as /stats.
func (in *Instance) dashboardRoutes(mux *http.ServeMux) {
	mux.Handle("GET /dashboard/", dashboard.Handler("/dashboard", "cachelet"))
	mux.HandleFunc("GET /dashboard", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/dashboard/", http.StatusFound)
	})
	mux.HandleFunc("GET /dashboard/api/state", func(w http.ResponseWriter, _ *http.Request) {
		st := cacheletState{Time: time.Now(), App: in.cfg.App, ID: in.cfg.ID, Endpoint: in.Endpoint(), Counters: in.cachelet.Counters()}
		if in.member != nil {
			r := in.member.Ring()
			for i, share := range r.Shares() {
				st.Ring = append(st.Ring, cacheletRingPart{Member: r.Members()[i], Share: share})
			}
		}
		body, err := json.Marshal(st)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		dashboard.SetHeaders(w)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		_, _ = w.Write(body)
	})
}
