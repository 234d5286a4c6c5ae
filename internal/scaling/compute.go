package scaling

import (
	"fmt"
	"time"
)

// ComputeStats is what the controller saw of an application over one query
// window.
type ComputeStats struct {
	// Instances is the number of instances running (not counting ones
	// being started).
	Instances int
	// Busy is the number of instances running an invocation now.
	Busy int
	// Queued is the number of invocations waiting for an instance, not
	// counting those an instance being started will take.
	Queued int
	// P50 is the median end-to-end latency over the window (queueing and
	// cold starts included).
	P50 time.Duration
	// Target is the latency the application should stay under: its spec's
	// scaling.latency_target; 0 for none.
	Target time.Duration
	// RequestRate is invocations per second over the window.
	RequestRate float64
}

// ComputeVote is the compute policy: FaaS platforms' own scaling on request
// rate, queue length and response time [Faa$T §4]. Each worker runs one
// invocation at a time, so concurrency is instances. In order:
//
//   - +ceil(Queued / QueuedPerInstance) when invocations queue: they wait
//     for want of instances.
//   - +1 when P50 is above Target with every instance busy: the median
//     covers the whole window, so it shows waits (queueing, cold starts)
//     that an empty queue now does not, and with no instance free the next
//     invocation would wait again; one more instance is the cautious step.
//     With an instance idle, more instances would not make the function
//     itself faster, so latency alone then votes 0.
//   - -1 when, with nothing queued and latency within Target, the demand
//     would keep the remaining instances at most ScaleInUtilisation busy
//     after one is removed: demand/(Instances-1) <= ScaleInUtilisation.
//     The demand is the larger of the busy instances now and the average
//     number busy over the window, estimated by Little's law as
//     RequestRate * P50 (P50 stands in for the mean latency; it
//     underestimates it for the usual right-skewed latencies, which the
//     utilisation threshold's headroom covers). Taking the larger keeps a
//     quiet instant inside a busy window, or a burst now inside a quiet
//     one, from scaling in.
//   - 0 otherwise. In particular the policy never votes away the last
//     instance: unloading an idle application is keep-alive's business.
func ComputeVote(s ComputeStats, cfg Config) Vote {
	cfg = cfg.withDefaults()
	v := Vote{Policy: PolicyCompute}
	slow := s.Target > 0 && s.P50 > s.Target
	switch {
	case s.Queued > 0:
		v.Delta = s.Queued / cfg.QueuedPerInstance
		if s.Queued%cfg.QueuedPerInstance != 0 {
			v.Delta++
		}
		v.Reason = fmt.Sprintf("%d queued", s.Queued)
	case slow && s.Instances > 0 && s.Busy >= s.Instances:
		v.Delta = 1
		v.Reason = fmt.Sprintf("p50 %v above target %v, all %d busy", s.P50, s.Target, s.Instances)
	case slow:
		v.Reason = fmt.Sprintf("p50 %v above target %v, %d of %d busy", s.P50, s.Target, s.Busy, s.Instances)
	case s.Instances > 1:
		demand := max(float64(s.Busy), s.RequestRate*s.P50.Seconds())
		after := demand / float64(s.Instances-1)
		if after <= cfg.ScaleInUtilisation {
			v.Delta = -1
		}
		v.Reason = fmt.Sprintf("demand %.2f: %.0f%% busy with %d", demand, 100*after, s.Instances-1)
	default:
		v.Reason = fmt.Sprintf("%d of %d busy", s.Busy, s.Instances)
	}
	return v
}
