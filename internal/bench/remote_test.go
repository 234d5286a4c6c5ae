package bench

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

func remoteReport() *Report {
	r := &Report{
		Benchmark: "access",
		Settings:  Settings{RemoteMethod: RemoteMethod},
		Sizes: []SizeResult{
			{Size: 4 << 10, Label: "4 KiB", Targets: []TargetResult{
				result(TargetStore, 400*time.Microsecond, 10),
				result(TargetCold, 500*time.Microsecond, 8),
				result(TargetWarm, 480*time.Microsecond, 8.5),
				result(TargetWarmLocal, 60*time.Microsecond, 68),
				result(TargetRemoteHit, 552*time.Microsecond, 7.4),
				result(TargetRemoteMiss, 650*time.Microsecond, 6.3),
			}},
			{Size: 1 << 20, Label: "1 MiB", Targets: []TargetResult{
				result(TargetStore, time.Millisecond, 1000),
				result(TargetRemoteHit, 900*time.Microsecond, 1100),
				result(TargetTCP, 450*time.Microsecond, 2200),
				result(TargetTCPFwd, 720*time.Microsecond, 1375),
				// no warm, warm-local, cold, remote-miss
			}},
		},
	}
	for i := range r.Sizes {
		r.Sizes[i].ComputeRatios()
	}
	return r
}

func TestRemoteRatios(t *testing.T) {
	r := remoteReport()
	x := r.Sizes[0].Ratios
	approx(t, "remote-hit/warm p50", x.RemoteHitWarmP50, 1.15)
	approx(t, "remote-hit/warm-local p50", x.RemoteHitWarmLocalP50, 9.2)
	approx(t, "remote-miss/cold p50", x.RemoteMissColdP50, 1.3)
	approx(t, "remote-miss/store p50", x.RemoteMissStoreP50, 1.625)
	if x.RemoteHitTCPMBps != nil || x.TCPFwdTCPMBps != nil || x.RemoteHitTCPFwdMBps != nil {
		t.Errorf("two-hop ratios without tcp: %+v", x)
	}
	y := r.Sizes[1].Ratios
	approx(t, "remote-hit/tcp MB/s", y.RemoteHitTCPMBps, 0.5)
	approx(t, "tcp-fwd/tcp MB/s", y.TCPFwdTCPMBps, 0.625)
	approx(t, "remote-hit/tcp-fwd MB/s", y.RemoteHitTCPFwdMBps, 0.8)
	if y.RemoteHitWarmP50 != nil || y.RemoteHitWarmLocalP50 != nil || y.RemoteMissColdP50 != nil || y.RemoteMissStoreP50 != nil {
		t.Errorf("ratios with a missing target: %+v", y)
	}
}

func TestRemoteTargetsAreKnown(t *testing.T) {
	for _, name := range []string{TargetRemoteHit, TargetRemoteMiss, TargetOwnerHit, TargetOwnerRemoteHit, TargetStoreFwd, TargetStore304Fwd, TargetStoreHTTP, TargetStore304HTTP, TargetTCPFwd} {
		found := false
		for _, a := range AllTargets() {
			found = found || a == name
		}
		if !found {
			t.Errorf("%s is not in AllTargets()", name)
		}
		if TargetDescription(name) == "" {
			t.Errorf("%s has no description", name)
		}
	}
}

func TestWriteTableRemote(t *testing.T) {
	var b strings.Builder
	if err := remoteReport().WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"remote: two cachelets of one application",
		"remote:     RH/LH remote-hit/warm p50 1.15x | remote-hit/warm-local p50 9.20x | remote-miss/cold p50 1.30x | remote-miss/store p50 1.62x",
		PaperRemoteHit,
		"RH/LH <= ~1.13x",
		"two hops:   remote-hit/tcp MB/s 0.50x | tcp-fwd/tcp MB/s 0.62x (the ceiling of two hops) | remote-hit/tcp-fwd MB/s 0.80x",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	// The summary has one line per size, "-" where a target is missing.
	var lines []string
	for l := range strings.SplitSeq(out, "\n") {
		if f := strings.Fields(l); len(f) > 2 && (f[0] == "4" || f[0] == "1") && (f[1] == "KiB" || f[1] == "MiB") {
			lines = append(lines, l)
		}
	}
	if len(lines) != 2 {
		t.Fatalf("summary lines %q", lines)
	}
	if f := strings.Fields(lines[0]); strings.Join(f[2:6], " ") != "552.0µs 480.0µs 1.15x 60.00µs" {
		t.Errorf("4 KiB summary: %q", lines[0])
	}
	if f := strings.Fields(lines[1]); strings.Join(f[2:5], " ") != "900.0µs - -" {
		t.Errorf("1 MiB summary: %q", lines[1])
	}
}

func TestWriteTableWithoutRemote(t *testing.T) {
	var b strings.Builder
	if err := testReport().WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{"remote:", "remote reads against local ones", "owner:", "two hops:"} {
		if strings.Contains(b.String(), line) {
			t.Errorf("a run without remote targets prints %q:\n%s", line, b.String())
		}
	}
}

// The owner targets: their ratio at each size, the 4 KiB check decided
// on it (1.15x), and their lines in the table.
func TestOwnerTargets(t *testing.T) {
	for _, tc := range []struct {
		remote time.Duration
		ratio  float64
		status string
	}{
		{330 * time.Microsecond, 1.1, "pass"},
		{345 * time.Microsecond, 1.15, "pass"},
		{360 * time.Microsecond, 1.2, "short"},
	} {
		r := &Report{
			Benchmark: "access",
			Settings:  Settings{OwnerMethod: OwnerMethod},
			Sizes: []SizeResult{
				{Size: 4 << 10, Label: "4 KiB", Targets: []TargetResult{
					result(TargetOwnerHit, 300*time.Microsecond, 13),
					result(TargetOwnerRemoteHit, tc.remote, 12),
				}},
				{Size: 1 << 20, Label: "1 MiB", Targets: []TargetResult{
					result(TargetOwnerRemoteHit, time.Millisecond, 1000),
					// no owner-hit
				}},
			},
		}
		for i := range r.Sizes {
			r.Sizes[i].ComputeRatios()
		}
		r.EvaluateChecks()
		approx(t, "owner-remote-hit/owner-hit p50", r.Sizes[0].Ratios.OwnerRemoteHitOwnerHitP50, tc.ratio)
		if x := r.Sizes[1].Ratios.OwnerRemoteHitOwnerHitP50; x != nil {
			t.Errorf("a ratio without owner-hit: %v", *x)
		}
		var check *Check
		for i, c := range r.Checks {
			if strings.HasPrefix(c.Name, "under owner, remote hit 4 KiB") {
				check = &r.Checks[i]
			}
		}
		if check == nil || check.Size != 4<<10 || check.Status() != tc.status || check.Reference != nil || check.Floor != nil {
			t.Fatalf("at %v the owner check is %+v, want %s", tc.remote, check, tc.status)
		}
		var b strings.Builder
		if err := r.WriteTable(&b); err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{
			"owner: two cachelets of a second application",
			fmt.Sprintf("owner:      owner-remote-hit/owner-hit p50 %.2fx", tc.ratio),
		} {
			if !strings.Contains(b.String(), want) {
				t.Errorf("table lacks %q:\n%s", want, b.String())
			}
		}
	}
}

// Every target the access benchmark measures has a place in the report's
// plots and a label there.
func TestTargetsPlottedAndLabelled(t *testing.T) {
	for _, name := range append(AllTargets(), TargetBoto3Store, TargetBoto3Warm) {
		if !slices.Contains(targetOrder, name) {
			t.Errorf("%s is not in the plots' order", name)
		}
		if _, ok := accessLabels[name]; !ok {
			t.Errorf("%s has no label", name)
		}
	}
}
