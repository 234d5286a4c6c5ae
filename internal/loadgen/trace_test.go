package loadgen

import (
	"strings"
	"testing"
	"time"
)

func TestParseTrace(t *testing.T) {
	const trace = `# a FaaSLoad-like trace
offset_seconds,app,function,event

0,image-processing,thumbnail
  2.5 , wordcount , pipeline:count , {"input": "corpus/a.txt", "n": [1, 2]}
{"offset": 1.5, "app": "ml-inference", "function": "detect", "event": {"image": "x.jpg"}}
{"offset": 2.5, "app": "wordcount", "pipeline": "count", "event": null}
0.000001,image-processing,blur,"quoted"
1e1,a,b
`
	got, err := ParseTrace(strings.NewReader(trace), "t.csv")
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		at     time.Duration
		target Target
		event  string
	}{
		{0, Target{"image-processing", "thumbnail", false}, ""},
		{time.Microsecond, Target{"image-processing", "blur", false}, `"quoted"`},
		{1500 * time.Millisecond, Target{"ml-inference", "detect", false}, `{"image": "x.jpg"}`},
		// Equal offsets keep the file's order.
		{2500 * time.Millisecond, Target{"wordcount", "count", true}, `{"input": "corpus/a.txt", "n": [1, 2]}`},
		{2500 * time.Millisecond, Target{"wordcount", "count", true}, ""},
		{10 * time.Second, Target{"a", "b", false}, ""},
	}
	if len(got) != len(want) {
		t.Fatalf("%d arrivals, want %d: %+v", len(got), len(want), got)
	}
	for i, w := range want {
		g := got[i]
		if g.At != w.at || g.Target != w.target || string(g.Event) != w.event {
			t.Errorf("arrival %d: %v %v %s, want %v %v %s", i, g.At, g.Target, g.Event, w.at, w.target, w.event)
		}
	}
}

func TestParseTraceErrors(t *testing.T) {
	tests := []struct {
		trace string
		want  string
	}{
		{"", "t.csv: no invocations"},
		{"# only a comment\n\n", "no invocations"},
		{"offset_seconds,app,function\n", "no invocations"},
		{"0,a,f\n1,a\n", "t.csv:2: want offset_seconds,app,function[,event], got 2 field(s)"},
		{"0,a,f\nsoon,a,f\n", `t.csv:2: bad offset "soon"`},
		{"0,a,f\n\n-1,a,f\n", "t.csv:3: offset -1 out of range"},
		{"NaN,a,f\n", `t.csv:1: bad offset "NaN"`},
		{"1e12,a,f\n", "t.csv:1: offset 1e12 out of range"},
		{"0,,f\n", "t.csv:1: no app"},
		{"0,a, \n", "t.csv:1: no function"},
		{"0,a,pipeline:\n", "t.csv:1: no pipeline"},
		{"0,a/b,f\n", `t.csv:1: bad app name "a/b"`},
		{"0,a,f g\n", `t.csv:1: bad function name "f g"`},
		{"0,a,f,{\"k\": 1\n", "t.csv:1: the event (field 4 to the end of the line) is not valid JSON"},
		{"0,a,f,\n", "t.csv:1: the event (field 4 to the end of the line) is not valid JSON"},
		{`{"offset": 1, "app": "a"}`, "t.csv:1: the JSON row needs exactly one of function and pipeline"},
		{`{"offset": 1, "app": "a", "function": "f", "pipeline": "p"}`, "exactly one of function and pipeline"},
		{`{"app": "a", "function": "f"}`, "t.csv:1: the JSON row has no offset"},
		{`{"offset": "1", "app": "a", "function": "f"}`, "t.csv:1: bad JSON row"},
		{`{"offset": 1, "app": "a", "function": "f", "tenant": 3}`, `t.csv:1: bad JSON row: json: unknown field "tenant"`},
		{`{"offset": 1, "app": "a", "function": "f"} {}`, "t.csv:1: bad JSON row: more than one value"},
		{`{"offset": 1, "app": "a", "function": "f"`, "t.csv:1: bad JSON row"},
		{"0,a,f\noffset,a,f\n", `t.csv:2: bad offset "offset"`}, // a header only comes first
		{"0,a,f,{\"big\": \"" + strings.Repeat("x", maxTraceLine) + "\"}\n", "t.csv: a line is longer than 16 MiB"},
	}
	for _, tt := range tests {
		_, err := ParseTrace(strings.NewReader(tt.trace), "t.csv")
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("trace %.60q: error %v, want %q", tt.trace, err, tt.want)
		}
	}
}
