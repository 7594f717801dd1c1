package main

// agent.go owns what reaches the guest's agent: the vsock dial as firecracker-containerd's shim
// does it (internal/vm/vsock.go: VSockDial, tryConnect, tryConnWrite, tryConnReadUntil), the
// data echoed through that connection, and a ping of the guest through the tap of the
// StaticNetworkConfiguration. The test guest (mode=blk hang=3, then mode=agent's services)
// stands in for the agent: it echoes every byte on its vsock port and answers ICMP echo on ip=.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os/exec"
	"strings"
	"time"
)

// firecracker-containerd's constants (internal/vm/vsock.go).
const (
	vsockRetryInterval     = 100 * time.Millisecond
	unixDialTimeout        = 100 * time.Millisecond
	vsockConnectMsgTimeout = 100 * time.Millisecond
	vsockAckMsgTimeout     = 1 * time.Second
)

// errNotTemporary marks a failure VSockDial does not retry (a failed write of the CONNECT line).
var errNotTemporary = errors.New("non-temporary vsock dial failure")

// tryConnect is firecracker-containerd's: dial the Unix socket, write `CONNECT <port>\n` within
// 100 ms (a failure is fatal), read up to '\n' within 1 s (a failure is retried) and expect a
// line starting "OK ". The connection is never closed before the reply is read.
func tryConnect(udsPath string, port uint32) (net.Conn, error) {
	conn, err := net.DialTimeout("unix", udsPath, unixDialTimeout)
	if err != nil {
		return nil, err // temporary: the socket may not be there yet
	}
	msg := fmt.Sprintf("CONNECT %d\n", port)
	_ = conn.SetDeadline(time.Now().Add(vsockConnectMsgTimeout))
	n, err := conn.Write([]byte(msg))
	_ = conn.SetDeadline(time.Time{})
	if err != nil || n != len(msg) {
		conn.Close()
		return nil, fmt.Errorf("%w: vsock connect message failure: wrote %d of %d bytes: %v",
			errNotTemporary, n, len(msg), err)
	}
	_ = conn.SetDeadline(time.Now().Add(vsockAckMsgTimeout))
	line, err := bufio.NewReaderSize(conn, 32).ReadString('\n')
	_ = conn.SetDeadline(time.Time{})
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("vsock ack message failure: %v", err)
	}
	if !strings.HasPrefix(line, "OK ") {
		conn.Close()
		return nil, fmt.Errorf(`expected to read "OK <port>", but instead read %q`, line)
	}
	return conn, nil
}

// vsockDial is VSockDial: tryConnect every 100 ms until it succeeds, a non-temporary failure,
// or the context's end. It returns the connection and the number of attempts.
func vsockDial(ctx context.Context, udsPath string, port uint32) (net.Conn, int, error) {
	ticker := time.NewTicker(vsockRetryInterval)
	defer ticker.Stop()
	var last error
	for attempts := 1; ; attempts++ {
		select {
		case <-ctx.Done():
			return nil, attempts, fmt.Errorf("%v (last attempt: %v)", ctx.Err(), last)
		case <-ticker.C:
			conn, err := tryConnect(udsPath, port)
			if err == nil {
				return conn, attempts, nil
			}
			if errors.Is(err, errNotTemporary) {
				return nil, attempts, err
			}
			last = err
		}
	}
}

// reachAgent dials the agent's port as the shim does and checks that what it sends comes back.
func (r *run) reachAgent() error {
	ctx, cancel := context.WithTimeout(r.ctx, r.o.guestTimeout)
	defer cancel()
	t0 := time.Now()
	conn, attempts, err := vsockDial(ctx, r.o.vsockPath, uint32(r.o.vsockPort))
	if err != nil {
		return err
	}
	defer conn.Close()
	fmt.Printf("gosdk:   CONNECT %d answered OK after %d attempt(s), %v\n", r.o.vsockPort,
		attempts, time.Since(t0).Round(time.Millisecond))
	payload := make([]byte, 64<<10)
	for i := range payload {
		payload[i] = byte(i*7 + i>>8)
	}
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	writeErr := make(chan error, 1)
	go func() {
		_, err := conn.Write(payload)
		writeErr <- err
	}()
	got := make([]byte, len(payload))
	if _, err := io.ReadFull(conn, got); err != nil {
		return fmt.Errorf("reading the echo: %w", err)
	}
	if err := <-writeErr; err != nil {
		return fmt.Errorf("writing to the agent: %w", err)
	}
	if !bytes.Equal(got, payload) {
		return errors.New("the echo differs from what was sent")
	}
	fmt.Printf("gosdk:   %d bytes echoed through the vsock\n", len(payload))
	return nil
}

// pingGuest runs the host's ping through the tap: every echo answered.
func (r *run) pingGuest() error {
	ctx, cancel := context.WithTimeout(r.ctx, 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "ping", "-c", "5", "-i", "0.2", "-W", "2", "-q",
		r.o.guestIP).CombinedOutput()
	text := strings.TrimSpace(string(out))
	if err != nil {
		return fmt.Errorf("ping %s: %v:\n%s", r.o.guestIP, err, text)
	}
	if !strings.Contains(text, " 0% packet loss") {
		return fmt.Errorf("ping %s lost echoes:\n%s", r.o.guestIP, text)
	}
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, "packet loss") || strings.HasPrefix(l, "rtt") {
			fmt.Printf("gosdk:   %s\n", l)
		}
	}
	return nil
}
