package sandbox

import (
	"slices"
	"strings"
	"testing"
)

func TestJailValidate(t *testing.T) {
	ok := func() Jail { return Jail{UID: 1000, GID: 1000, Root: "/var/lib/x/root", ReadOnly: []string{"/usr"}} }
	for _, tc := range []struct {
		name string
		edit func(*Jail)
		want string // "" = valid
	}{
		{"valid", func(*Jail) {}, ""},
		{"root uid", func(j *Jail) { j.UID = 0 }, "unprivileged"},
		{"root gid", func(j *Jail) { j.GID = 0 }, "unprivileged"},
		{"relative root", func(j *Jail) { j.Root = "root" }, "jail root"},
		{"root is /", func(j *Jail) { j.Root = "/" }, "jail root"},
		{"relative path", func(j *Jail) { j.ReadOnly = []string{"usr"} }, "absolute"},
		{"unclean path", func(j *Jail) { j.ReadOnly = []string{"/usr/../etc"} }, "absolute, clean"},
		{"path under /proc", func(j *Jail) { j.ReadOnly = []string{"/proc/1"} }, "/proc"},
		{"path /tmp", func(j *Jail) { j.ReadOnly = []string{"/tmp"} }, "private /tmp"},
		{"path under /dev", func(j *Jail) { j.ReadOnly = []string{"/dev/sda"} }, "/dev"},
		{"path under /tmp", func(j *Jail) { j.ReadOnly = []string{"/tmp/venv"} }, ""},
		{"file outside /run", func(j *Jail) { j.Files = map[string]string{"/etc/x": ""} }, "under /run"},
		{"file under /run", func(j *Jail) { j.Files = map[string]string{"/run/x/y": ""} }, ""},
		{"netns fd 2", func(j *Jail) { j.NetNSFD = 2 }, "3 or more"},
		{"negative tmp", func(j *Jail) { j.TmpBytes = -1 }, "negative"},
		{"relative code", func(j *Jail) { j.Code = "code" }, "absolute"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := ok()
			tc.edit(&j)
			err := j.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("Validate: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("Validate: %v; want an error with %q", err, tc.want)
			}
		})
	}
	j := ok()
	if err := j.Validate(); err != nil || j.Hostname != "sandbox" || j.TmpBytes != DefaultTmpBytes || j.Dir != "/" {
		t.Errorf("defaults: %+v %v", j, err)
	}
}

func TestJailArgsRoundTrip(t *testing.T) {
	j := &Jail{UID: 7, GID: 8, Root: "/r", ReadOnly: []string{"/usr", "/etc"}, Code: "/c", Dir: CodeDir,
		Files: map[string]string{"/run/a": "b"}, NetNSFD: 5, KeepFDs: []int{3, 4}}
	args, err := j.Args([]string{"/usr/bin/python3", "-m", "x"})
	if err != nil {
		t.Fatal(err)
	}
	if args[0] != InitCommand {
		t.Fatalf("args %q", args)
	}
	got, argv, err := ParseInitArgs(args[1:])
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(argv, []string{"/usr/bin/python3", "-m", "x"}) || got.UID != 7 || got.GID != 8 || got.NetNSFD != 5 ||
		got.Code != "/c" || got.Files["/run/a"] != "b" || !slices.Equal(got.KeepFDs, []int{3, 4}) {
		t.Errorf("round trip: %+v %q", got, argv)
	}
	if _, err := j.Args([]string{"python3"}); err == nil {
		t.Error("a relative program was accepted")
	}
	for _, bad := range [][]string{nil, {"{}"}, {"{}", "x", "/bin/true"}, {`{"uid":1,"gid":1,"root":"/r","bogus":1}`, "--", "/bin/true"}} {
		if _, _, err := ParseInitArgs(bad); err == nil {
			t.Errorf("ParseInitArgs(%q) accepted", bad)
		}
	}
}
