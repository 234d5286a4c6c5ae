package sim

import (
	"errors"
	"io"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

func drain(t *testing.T, s Source) ([]Event, error) {
	t.Helper()
	var out []Event
	for {
		e, err := s.Next()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, e)
	}
}

func TestBlobTraceHead(t *testing.T) {
	f, err := os.Open("testdata/blob-trace-head.csv")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	src, err := NewBlobTrace(f)
	if err != nil {
		t.Fatal(err)
	}
	events, err := drain(t, src)
	if err != nil {
		t.Fatal(err)
	}
	if len(events) < 4 {
		t.Fatalf("%d events", len(events))
	}
	want := Event{
		Time: time.UnixMilli(1606714231054).UTC(), Kind: Read, App: "q8act97c", Invocation: 1806324271,
		Bucket: "1209884869", Key: "1wx5dgohq1kiwjum", Version: "fe17pjoa6k", Size: 28,
	}
	if !reflect.DeepEqual(events[0], want) {
		t.Fatalf("first event\n got %+v\nwant %+v", events[0], want)
	}
	r, err := Run(&SliceSource{Events: events}, Config{CacheSizes: []int64{1 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	if r.Caches[0].Reads.Count != int64(len(events)) || r.Caches[0].Outcomes["LH"].Count == 0 {
		t.Fatalf("replay of the head: %+v", r.Caches[0])
	}
}

func TestBlobTraceErrors(t *testing.T) {
	head := "Timestamp,AnonRegion,AnonUserId,AnonAppName,AnonFunctionInvocationId,AnonBlobName,BlobType,AnonBlobETag,BlobBytes,Read,Write,Datetime\n"
	for name, tc := range map[string]struct{ in, msg string }{
		"empty":     {"", "empty file"},
		"no column": {"Timestamp,AnonUserId\n", `no "anonappname" column`},
		"time":      {head + "yesterday,r,1,a,1,b,t,e,1.0,True,False,x\n", "line 2: timestamp"},
		"size":      {head + "1,r,1,a,1,b,t,e,big,True,False,x\n", "BlobBytes"},
		"negative":  {head + "1,r,1,a,1,b,t,e,-4,True,False,x\n", "BlobBytes"},
		"bool":      {head + "1,r,1,a,1,b,t,e,1,Maybe,False,x\n", "neither True nor False"},
		"short":     {head + "1,r,1\n", "fields"},
		"blob":      {head + "1,r,1,a,1,,t,e,1,True,False,x\n", "no AnonBlobName"},
	} {
		t.Run(name, func(t *testing.T) {
			src, err := NewBlobTrace(strings.NewReader(tc.in))
			if err == nil {
				_, err = drain(t, src)
			}
			if !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("error %v, want ErrFormat saying %q", err, tc.msg)
			}
		})
	}
}

func TestAccessLog(t *testing.T) {
	in := `time,op,key,size,offset,length,app
0,GET,m.bin,1000,,,fn
0.5,GET,m.bin,1000,0,100,fn
2020-01-01T00:00:01Z,PUT,out.json,20,,,
`
	src, err := NewAccessLog(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	events, err := drain(t, src)
	if err != nil {
		t.Fatal(err)
	}
	want := []Event{
		{Time: AccessLogStart, Kind: Read, App: "fn", Bucket: "bucket", Key: "m.bin", Size: 1000},
		{Time: AccessLogStart.Add(500 * time.Millisecond), Kind: Read, App: "fn", Bucket: "bucket", Key: "m.bin", Size: 1000, Length: 100},
		{Time: AccessLogStart.Add(time.Second), Kind: Write, App: "app", Bucket: "bucket", Key: "out.json", Size: 20},
	}
	if len(events) != len(want) {
		t.Fatalf("%d events", len(events))
	}
	for i := range want {
		if !reflect.DeepEqual(events[i], want[i]) {
			t.Errorf("event %d\n got %+v\nwant %+v", i, events[i], want[i])
		}
	}
	r, err := Run(&SliceSource{Events: events}, Config{CacheSizes: []int64{1 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	// The ranged read hits the object the first read cached, and returns
	// its range.
	if c := r.Caches[0]; c.Outcomes["LH"] != (Tally{1, 100}) || c.StoreBytes != 1000 {
		t.Fatalf("%+v", c)
	}
}

func TestAccessLogErrors(t *testing.T) {
	for name, tc := range map[string]struct{ in, msg string }{
		"no size": {"time,op,key\n", `no "size" column`},
		"time":    {"time,op,key,size\nnoon,GET,k,1\n", "line 2: time"},
		"op":      {"time,op,key,size\n0,DELETE,k,1\n", `op "DELETE"`},
		"key":     {"time,op,key,size\n0,GET,,1\n", "empty key"},
		"size":    {"time,op,key,size\n0,GET,k,-1\n", "size"},
		"range":   {"time,op,key,size,offset,length\n0,GET,k,10,5,6\n", "beyond the object"},
		"quote":   {"time,op,key,size\n0,GET,\"k,1\n", "bad trace"},
	} {
		t.Run(name, func(t *testing.T) {
			src, err := NewAccessLog(strings.NewReader(tc.in))
			if err == nil {
				_, err = drain(t, src)
			}
			if !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("error %v, want ErrFormat saying %q", err, tc.msg)
			}
		})
	}
}

func azureCounts(rows ...string) string {
	var b strings.Builder
	b.WriteString("HashOwner,HashApp,HashFunction,Trigger")
	for m := 1; m <= 1440; m++ {
		b.WriteString("," + strconv.Itoa(m))
	}
	b.WriteString("\n")
	for _, r := range rows {
		b.WriteString(r + "\n")
	}
	return b.String()
}

// row gives a function's counts: counts[m] in minute m+1, zeros after.
func row(app, fn string, counts ...int) string {
	cells := make([]string, 1440)
	for i := range cells {
		cells[i] = "0"
		if i < len(counts) {
			cells[i] = strconv.Itoa(counts[i])
		}
	}
	return "o," + app + "," + fn + ",http," + strings.Join(cells, ",")
}

func TestAzureInvocations(t *testing.T) {
	counts := azureCounts(row("a1", "f1", 2, 0, 1), row("a2", "f2", 1))
	durations := "HashOwner,HashApp,HashFunction,Average,Count\no,a1,f1,1500,3\n"
	memory := "HashOwner,HashApp,SampleCount,AverageAllocatedMb\no,a1,3,200.4\n"
	src, err := NewAzureInvocations(strings.NewReader(counts), strings.NewReader(durations), strings.NewReader(memory))
	if err != nil {
		t.Fatal(err)
	}
	events, err := drain(t, src)
	if err != nil {
		t.Fatal(err)
	}
	type got struct {
		at  time.Duration
		app string
		dur time.Duration
		mem int
	}
	want := []got{
		{15 * time.Second, "a1", 1500 * time.Millisecond, 200},
		{30 * time.Second, "a2", 0, 0},
		{45 * time.Second, "a1", 1500 * time.Millisecond, 200},
		{2*time.Minute + 30*time.Second, "a1", 1500 * time.Millisecond, 200},
	}
	if len(events) != len(want) {
		t.Fatalf("%d events: %+v", len(events), events)
	}
	for i, w := range want {
		e := events[i]
		if g := (got{e.Time.Sub(AzureStart), e.App, e.Duration, e.MemoryMB}); g != w || e.Kind != Invoke {
			t.Errorf("event %d: got %+v, want %+v", i, g, w)
		}
		// The function's hash names the function: a model each.
		if wantFn := "f" + w.app[1:]; e.Function != wantFn {
			t.Errorf("event %d: function %q, want %q", i, e.Function, wantFn)
		}
	}
}

func TestAzureInvocationsErrors(t *testing.T) {
	for name, tc := range map[string]struct{ counts, durations, msg string }{
		"no minutes": {"HashOwner,HashApp,HashFunction\n", "", `no "1" column`},
		"count":      {strings.Replace(azureCounts(row("a", "f", 1)), ",1,0,", ",x,0,", 1), "", "minute 1"},
		"duration":   {azureCounts(), "HashFunction,Average\nf,slow\n", "Average"},
		"order":      {strings.Replace(azureCounts(), ",1,2,", ",2,1,", 1), "", "consecutive"},
	} {
		t.Run(name, func(t *testing.T) {
			var d io.Reader
			if tc.durations != "" {
				d = strings.NewReader(tc.durations)
			}
			_, err := NewAzureInvocations(strings.NewReader(tc.counts), d, nil)
			if !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("error %v, want ErrFormat saying %q", err, tc.msg)
			}
		})
	}
}
