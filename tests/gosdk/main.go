// Command gosdk drives Osprey through the unmodified firecracker-go-sdk (v1.0.0, pinned in
// go.mod), the client library under firecracker-containerd, flintlock and Ignite. It boots
// Osprey's test guest with a root drive and a second drive (and, when asked, a vsock in
// VsockDevices and a tap in NetworkInterfaces' StaticConfiguration), waits for the guest's
// report, pauses and resumes the VM, swaps the second drive's backing file with
// UpdateGuestDrive and waits for the guest to read the new file, reaches the guest's agent
// port through the vsock as firecracker-containerd does (CONNECT, "OK " within 1 s, retried)
// and checks the echo, pings the guest through the tap, reads the metrics file it configured,
// and shuts down with Shutdown then StopVMM. It uses the SDK's public API only.
//
// Every step prints a progress line; the first failing step prints "gosdk: FAILED at step N/M
// (name): why" and the program exits 1 (2 for bad flags). tests/gosdk.rs builds and runs it in
// `make test`; by hand:
//
//	go build -o /tmp/gosdk . && /tmp/gosdk -osprey ../../target/release/osprey \
//	    -kernel ../../guest-images/build/test-guest.elf -root A.img -data B.img -swap-to C.img \
//	    -workdir /tmp/gosdk-run -kernel-args '...' -report '...' -after-swap '...'
package main

import (
	"flag"
	"fmt"
	"os"
	"regexp"
	"time"
)

// options are the command-line flags.
type options struct {
	osprey, kernel, root, data, swapTo, workdir string
	kernelArgs                                  string
	report, afterSwap, final, fail              *regexp.Regexp
	vcpus, memMiB                               int64
	guestTimeout, total                         time.Duration
	sdkLogLevel                                 string
	vsockPath                                   string
	vsockPort, vsockCID                         uint
	tap, mac, guestIP                           string
}

func parseOptions() (*options, error) {
	o := &options{}
	var report, afterSwap, final, fail string
	flag.StringVar(&o.osprey, "osprey", "", "the osprey binary (VMCommandBuilder.WithBin)")
	flag.StringVar(&o.kernel, "kernel", "", "the guest kernel: Osprey's test guest ELF")
	flag.StringVar(&o.root, "root", "", "the root drive's file")
	flag.StringVar(&o.data, "data", "", "the second drive's file at boot")
	flag.StringVar(&o.swapTo, "swap-to", "", "the file UpdateGuestDrive puts behind the second drive")
	flag.StringVar(&o.workdir, "workdir", "", "folder for the API socket, the log and the metrics files")
	flag.StringVar(&o.kernelArgs, "kernel-args", "", "the guest's command line (its workload)")
	flag.StringVar(&report, "report", "", "regexp: the guest's console line that shows it is up and reading")
	flag.StringVar(&afterSwap, "after-swap", "", "regexp: the console line that shows the guest read the new file")
	flag.StringVar(&final, "final", "", "regexp (optional): a console line to wait for after the swap line")
	flag.StringVar(&fail, "fail",
		`^EXCEPTION|osprey-test-guest: error|osprey-test-guest: exit [1-9]|^BLK .*"failures":[1-9]`,
		"regexp: a console line that fails the run at once")
	flag.Int64Var(&o.vcpus, "vcpus", 1, "vCPUs (PUT /machine-config)")
	flag.Int64Var(&o.memMiB, "mem-mib", 128, "guest memory in MiB (PUT /machine-config)")
	flag.DurationVar(&o.guestTimeout, "guest-timeout", 20*time.Second, "how long to wait for each console line")
	flag.DurationVar(&o.total, "timeout", 55*time.Second, "limit for the whole run")
	flag.StringVar(&o.sdkLogLevel, "sdk-log", "warning", "the SDK's own log level (logrus)")
	flag.StringVar(&o.vsockPath, "vsock", "", "optional: a vsock (VsockDevices) with this uds_path; the guest's agent port is reached through it")
	flag.UintVar(&o.vsockPort, "vsock-port", 10789, "the guest's agent port (firecracker-containerd's is 10789)")
	flag.UintVar(&o.vsockCID, "vsock-cid", 3, "the vsock's guest CID")
	flag.StringVar(&o.tap, "tap", "", "optional: a tap for NetworkInterfaces (StaticConfiguration.HostDevName)")
	flag.StringVar(&o.mac, "mac", "", "the guest's MAC (StaticConfiguration.MacAddress), with -tap")
	flag.StringVar(&o.guestIP, "ping", "", "with -tap: the guest's address, pinged through the tap")
	flag.Parse()
	for name, v := range map[string]string{"osprey": o.osprey, "kernel": o.kernel, "root": o.root,
		"data": o.data, "swap-to": o.swapTo, "workdir": o.workdir, "report": report,
		"after-swap": afterSwap} {
		if v == "" {
			return nil, fmt.Errorf("-%s is required", name)
		}
	}
	var err error
	compile := func(s string) *regexp.Regexp {
		if s == "" || err != nil {
			return nil
		}
		var re *regexp.Regexp
		re, err = regexp.Compile(s)
		return re
	}
	o.report, o.afterSwap, o.final, o.fail = compile(report), compile(afterSwap), compile(final), compile(fail)
	return o, err
}

func main() {
	o, err := parseOptions()
	if err != nil {
		fmt.Fprintf(os.Stderr, "gosdk: %v\n", err)
		flag.Usage()
		os.Exit(2)
	}
	if err := os.MkdirAll(o.workdir, 0o755); err != nil {
		fmt.Fprintf(os.Stderr, "gosdk: %v\n", err)
		os.Exit(2)
	}
	r := newRun(o)
	err = r.steps()
	r.cleanup()
	if err != nil {
		fmt.Printf("gosdk: %v\n", err)
		os.Exit(1)
	}
	fmt.Printf("gosdk: PASS (%d steps in %.1f s)\n", len(r.plan), time.Since(r.started).Seconds())
}
