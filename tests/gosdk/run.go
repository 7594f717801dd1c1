package main

// run.go owns one run of the SDK against Osprey: the steps in order (each named, timed and
// reported), the SDK's Machine and the VMM process it starts, and the cleanup that leaves no
// VMM behind.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"time"

	fc "github.com/firecracker-microvm/firecracker-go-sdk"
	"github.com/firecracker-microvm/firecracker-go-sdk/client/models"
	"github.com/sirupsen/logrus"
)

// run is one boot of the VM through the SDK.
type run struct {
	o       *options
	started time.Time
	ctx     context.Context // the VMM process lives as long as this (exec.CommandContext)
	cancel  context.CancelFunc
	logger  *logrus.Entry
	console *lineLog // the guest's serial console: Osprey's stdout
	vmmLog  *lineLog // Osprey's stderr
	machine *fc.Machine
	// startCalled is set once Start may have launched the VMM process.
	startCalled bool
	exited      chan struct{} // closed when Machine.Wait returns
	waitErr     error         // Machine.Wait's result, valid once exited is closed
	dataID      string
	sock        string
	logPath     string
	metrics     string
	// swapFrom is the console line count when the swap was asked for: the line showing the
	// new file must come after it.
	swapFrom int
	plan     []step
}

// step is one named part of the run.
type step struct {
	name string
	do   func() error
}

func newRun(o *options) *run {
	ctx, cancel := context.WithTimeout(context.Background(), o.total)
	lg := logrus.New()
	lg.SetOutput(os.Stderr)
	if lvl, err := logrus.ParseLevel(o.sdkLogLevel); err == nil {
		lg.SetLevel(lvl)
	}
	r := &run{
		o: o, started: time.Now(), ctx: ctx, cancel: cancel, logger: logrus.NewEntry(lg),
		console: newLineLog("guest| ", os.Stdout),
		vmmLog:  newLineLog("osprey| ", os.Stdout),
		exited:  make(chan struct{}),
		dataID:  "data",
		sock:    filepath.Join(o.workdir, "api.sock"),
		logPath: filepath.Join(o.workdir, "osprey.log"),
		metrics: filepath.Join(o.workdir, "metrics.json"),
	}
	r.plan = []step{
		{"NewMachine (VMCommandBuilder.WithBin(osprey))", r.newMachine},
		{"Start: logger, metrics, machine-config, boot-source, 2 drives, network-interfaces, vsock, InstanceStart", r.start},
		{"DescribeInstanceInfo says Running; GetFirecrackerVersion", r.describeRunning},
		{"the guest's report on the console", r.guestReport},
		{"PauseVM, DescribeInstanceInfo says Paused", r.pause},
		{"ResumeVM, DescribeInstanceInfo says Running", r.resume},
		{"UpdateGuestDrive swaps the second drive's file", r.swapDrive},
		{"the guest reads the new file", r.guestReadsNewFile},
	}
	if o.vsockPath != "" {
		r.plan = append(r.plan, step{fmt.Sprintf("the agent through the vsock: CONNECT %d, OK within 1 s "+
			"(retried as firecracker-containerd's VSockDial), 64 KiB echoed", o.vsockPort), r.reachAgent})
	}
	if o.tap != "" && o.guestIP != "" {
		r.plan = append(r.plan, step{"ping the guest through the tap", r.pingGuest})
	}
	r.plan = append(r.plan, []step{
		{"FlushMetrics; the metrics file shows the second drive's requests", r.flushMetrics},
		{"Shutdown (SendCtrlAltDel)", r.shutdown},
		{"StopVMM, Wait: the VMM exits cleanly", r.stop},
		{"after the exit: the metrics and log files, no API socket left", r.filesAfterExit},
	}...)
	return r
}

// steps runs the plan in order and stops at the first failure, naming the step.
func (r *run) steps() error {
	for i, s := range r.plan {
		fmt.Printf("gosdk: [%d/%d] %s ...\n", i+1, len(r.plan), s.name)
		t0 := time.Now()
		if err := s.do(); err != nil {
			return fmt.Errorf("FAILED at step %d/%d (%s) after %v: %w", i+1, len(r.plan), s.name,
				time.Since(t0).Round(time.Millisecond), err)
		}
		fmt.Printf("gosdk: [%d/%d] ok (%v)\n", i+1, len(r.plan), time.Since(t0).Round(time.Millisecond))
	}
	return nil
}

// cleanup leaves no VMM behind, whatever happened: SIGTERM, then the context's SIGKILL.
func (r *run) cleanup() {
	if r.startCalled {
		select {
		case <-r.exited:
		default:
			_ = r.machine.StopVMM()
			select {
			case <-r.exited:
			case <-time.After(5 * time.Second):
			}
		}
	}
	r.cancel()
}

func (r *run) newMachine() error {
	cfg := fc.Config{
		SocketPath:      r.sock,
		LogPath:         r.logPath,
		LogLevel:        "Debug",
		MetricsPath:     r.metrics,
		KernelImagePath: r.o.kernel,
		KernelArgs:      r.o.kernelArgs,
		Drives: fc.NewDrivesBuilder(r.o.root).
			AddDrive(r.o.data, false, fc.WithDriveID(r.dataID)).
			Build(),
		MachineCfg: models.MachineConfiguration{
			VcpuCount:  fc.Int64(r.o.vcpus),
			MemSizeMib: fc.Int64(r.o.memMiB),
		},
		VMID: "gosdk-test",
	}
	if r.o.vsockPath != "" {
		cfg.VsockDevices = []fc.VsockDevice{{ID: "agent_api", Path: r.o.vsockPath, CID: uint32(r.o.vsockCID)}}
	}
	if r.o.tap != "" {
		cfg.NetworkInterfaces = fc.NetworkInterfaces{{
			StaticConfiguration: &fc.StaticNetworkConfiguration{MacAddress: r.o.mac, HostDevName: r.o.tap},
		}}
	}
	// The SDK writes the log and metrics to existing paths (a file or a fifo); Firecracker's
	// users create them first, so does this test.
	for _, p := range []string{r.logPath, r.metrics} {
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			return err
		}
	}
	cmd := fc.VMCommandBuilder{}.
		WithBin(r.o.osprey).
		WithSocketPath(r.sock).
		AddArgs("--id", cfg.VMID).
		WithStdout(r.console).
		WithStderr(r.vmmLog).
		Build(r.ctx)
	m, err := fc.NewMachine(r.ctx, cfg, fc.WithProcessRunner(cmd), fc.WithLogger(r.logger))
	if err != nil {
		return err
	}
	r.machine = m
	// Machine.Wait returns once the VMM process has exited (or failed to start).
	go func() {
		r.waitErr = m.Wait(context.Background())
		close(r.exited)
	}()
	return nil
}

func (r *run) start() error {
	r.startCalled = true
	return r.machine.Start(r.ctx)
}

// expectState checks GET / (InstanceInfo).
func (r *run) expectState(want string) error {
	info, err := r.machine.DescribeInstanceInfo(r.ctx)
	if err != nil {
		return err
	}
	if got := fc.StringValue(info.State); got != want {
		return fmt.Errorf("InstanceInfo.state is %q, want %q (id %q, app %q)", got, want,
			fc.StringValue(info.ID), fc.StringValue(info.AppName))
	}
	return nil
}

func (r *run) describeRunning() error {
	if err := r.expectState(models.InstanceInfoStateRunning); err != nil {
		return err
	}
	v, err := r.machine.GetFirecrackerVersion(r.ctx)
	if err != nil {
		return err
	}
	fmt.Printf("gosdk:   firecracker_version %q\n", v)
	return nil
}

// consoleLine waits for the next console line matching want, from line `from` on.
func (r *run) consoleLine(from int, want *regexp.Regexp) (string, error) {
	line, _, err := r.console.waitFor(from, want, r.o.fail, r.o.guestTimeout, r.exited)
	return line, err
}

func (r *run) guestReport() error {
	line, err := r.consoleLine(0, r.o.report)
	if err == nil {
		fmt.Printf("gosdk:   seen %q\n", short(line))
	}
	return err
}

func (r *run) pause() error {
	if err := r.machine.PauseVM(r.ctx); err != nil {
		return err
	}
	return r.expectState(models.InstanceInfoStatePaused)
}

func (r *run) resume() error {
	if err := r.machine.ResumeVM(r.ctx); err != nil {
		return err
	}
	return r.expectState(models.InstanceInfoStateRunning)
}

func (r *run) swapDrive() error {
	r.swapFrom = r.console.count()
	return r.machine.UpdateGuestDrive(r.ctx, r.dataID, r.o.swapTo)
}

func (r *run) guestReadsNewFile() error {
	line, err := r.consoleLine(r.swapFrom, r.o.afterSwap)
	if err != nil {
		return err
	}
	fmt.Printf("gosdk:   seen %q\n", short(line))
	if r.o.final != nil {
		if line, err = r.consoleLine(r.swapFrom, r.o.final); err != nil {
			return err
		}
		fmt.Printf("gosdk:   seen %q\n", short(line))
	}
	return nil
}

// short cuts a console line for a progress message (the whole line is echoed as it arrives).
func short(line string) string {
	if len(line) > 100 {
		return line[:100] + "..."
	}
	return line
}

// flushMetrics asks for a metrics write (PUT /actions FlushMetrics, through the SDK's client)
// and waits for the file to show the second drive's requests.
func (r *run) flushMetrics() error {
	client := fc.NewClient(r.sock, r.logger, false)
	_, err := client.CreateSyncAction(r.ctx, &models.InstanceActionInfo{
		ActionType: fc.String(models.InstanceActionInfoActionTypeFlushMetrics),
	})
	if err != nil {
		return err
	}
	return expectDriveMetrics(r.metrics, r.dataID, 5*time.Second)
}

func (r *run) shutdown() error {
	return r.machine.Shutdown(r.ctx)
}

// stop gives the VMM a second to act on Shutdown (a Linux guest reboots and the VMM exits; the
// test guest ignores the keys), then sends StopVMM's SIGTERM and waits.
func (r *run) stop() error {
	select {
	case <-r.exited:
		fmt.Println("gosdk:   the VMM had already exited after Shutdown")
	case <-time.After(time.Second):
	}
	if err := r.machine.StopVMM(); err != nil {
		return err
	}
	select {
	case <-r.exited:
	case <-time.After(10 * time.Second):
		return errors.New("the VMM did not exit within 10 s of SIGTERM")
	}
	return r.waitErr
}

func (r *run) filesAfterExit() error {
	if err := expectDriveMetrics(r.metrics, r.dataID, 0); err != nil {
		return err
	}
	if err := nonEmpty(r.logPath); err != nil {
		return err
	}
	if _, err := os.Stat(r.sock); err == nil {
		return fmt.Errorf("the API socket %s is still there", r.sock)
	}
	return nil
}

// nonEmpty checks that the file at p has content, and prints its size.
func nonEmpty(p string) error {
	st, err := os.Stat(p)
	if err != nil {
		return err
	}
	if st.Size() == 0 {
		return fmt.Errorf("%s is empty", p)
	}
	fmt.Printf("gosdk:   %s: %d bytes\n", filepath.Base(p), st.Size())
	return nil
}
