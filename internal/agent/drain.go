package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/hoard-io/hoard/internal/control"
	"github.com/hoard-io/hoard/internal/pki"
)

// drainTimeout bounds the drain of a dead instance's log: a little over
// the drain's own bound (`hoard serve`'s drainLogTimeout), then SIGKILL.
const drainTimeout = 2*time.Minute + 15*time.Second

// drainDocName is the drain's document's name in the cachelet's
// directory.
const drainDocName = "drain.json"

// drainLog delivers the writes the instance's dead cachelet left in its
// durable log (durable.go): `hoard serve --document` with DrainLog, run
// as the cachelet was (its uid and disk group, its sandbox, the
// application's store identity; the secrets in a 0600 document of its
// own, never on the command line or in the environment), which replays
// the log and exits 0 once it is empty. Called by teardown, before the
// sandbox and the jail go.
func (in *Instance) drainLog() error {
	a := in.agent
	dir := in.ctlDir
	if dir == "" {
		dir = in.dir
	}
	if dir == "" || a.cfg.HoardBin == "" {
		return errors.New("no directory or hoard binary for the drain")
	}
	var keyOwner *pki.Owner
	if in.cacheletUID != 0 {
		keyOwner = &pki.Owner{UID: in.cacheletUID, GID: in.cacheletUID}
	}
	tls, err := in.cacheletTLS(dir, keyOwner)
	if err != nil {
		return err
	}
	d := in.document(control.Endpoint{}, tls)
	d.DrainLog, d.S3ListenFD = true, 0
	disk := *in.disk
	disk.DirFD = 0
	if in.diskGID != 0 {
		disk.DirFD = 3 // ExtraFiles[0]
	}
	d.Disk = &disk
	docPath := filepath.Join(dir, drainDocName)
	if err := control.WriteDocument(docPath, d); err != nil {
		return fmt.Errorf("writing the drain's configuration: %w", err)
	}
	defer os.Remove(docPath)
	if tls != nil {
		defer os.Remove(tls.Key)
	}
	if in.cacheletUID != 0 {
		if err := os.Chown(docPath, in.cacheletUID, in.cacheletUID); err != nil {
			return fmt.Errorf("the drain's configuration: %w", err)
		}
	}
	cmd := exec.Command(a.cfg.HoardBin, "serve", "--document", docPath)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	cmd.Stdout, cmd.Stderr = in.logFile, in.logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if in.cacheletUID != 0 {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uint32(in.cacheletUID), Gid: uint32(in.cacheletUID), Groups: []uint32{}}
		if in.diskGID != 0 {
			cmd.SysProcAttr.Credential.Groups = []uint32{uint32(in.diskGID)}
		}
	}
	if in.diskGID != 0 {
		f, err := os.Open(in.disk.Dir)
		if err != nil {
			return fmt.Errorf("the disk tier: %w", err)
		}
		defer f.Close()
		cmd.ExtraFiles = []*os.File{f}
	}
	ctx, cancel := context.WithTimeout(context.Background(), drainTimeout)
	defer cancel()
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting the drain: %w", err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	if in.box != nil {
		if err := in.box.Add(cmd.Process.Pid); err != nil {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
			return fmt.Errorf("moving the drain into the sandbox: %w", err)
		}
	}
	a.log.Info("draining the durable log of a dead instance", "instance", in.req.ID, "app", in.spec.Name, "uid", in.cacheletUID)
	select {
	case err = <-done:
	case <-ctx.Done():
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		err = errors.Join(ctx.Err(), <-done)
	}
	if err != nil {
		return fmt.Errorf("the drain: %w", err)
	}
	a.log.Info("durable log of a dead instance drained", "instance", in.req.ID, "app", in.spec.Name, "took", time.Since(start).Round(time.Millisecond))
	return nil
}
