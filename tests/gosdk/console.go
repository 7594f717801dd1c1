package main

// console.go owns the VMM's output streams: an io.Writer that splits what the VMM writes into
// lines, echoes each with a prefix, keeps them, and lets the steps wait for a line that matches a
// pattern (or notice one that reports a failure).

import (
	"bytes"
	"fmt"
	"io"
	"regexp"
	"sync"
	"time"
)

// lineLog collects the lines of one output stream.
type lineLog struct {
	prefix string
	echo   io.Writer

	mu      sync.Mutex
	partial []byte
	lines   []string
	changed chan struct{} // closed and replaced whenever a line arrives
}

func newLineLog(prefix string, echo io.Writer) *lineLog {
	return &lineLog{prefix: prefix, echo: echo, changed: make(chan struct{})}
}

// Write takes any chunk of output; complete lines are recorded, the rest waits for its newline.
func (l *lineLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.partial = append(l.partial, p...)
	for {
		i := bytes.IndexByte(l.partial, '\n')
		if i < 0 {
			break
		}
		line := string(bytes.TrimRight(l.partial[:i], "\r"))
		l.partial = l.partial[i+1:]
		l.lines = append(l.lines, line)
		fmt.Fprintf(l.echo, "%s%s\n", l.prefix, line)
	}
	close(l.changed)
	l.changed = make(chan struct{})
	return len(p), nil
}

// snapshot returns the lines so far and a channel closed when more arrive.
func (l *lineLog) snapshot() ([]string, <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.lines...), l.changed
}

// waitFor waits until a line at index >= from matches want, and returns that line and the index
// after it. A line matching fail (when not nil) ends the wait with an error, as does the timeout
// or exited being closed (the VMM is gone, no more lines will come).
func (l *lineLog) waitFor(from int, want, fail *regexp.Regexp, timeout time.Duration,
	exited <-chan struct{}) (string, int, error) {
	deadline := time.After(timeout)
	for {
		lines, changed := l.snapshot()
		for i := from; i < len(lines); i++ {
			if fail != nil && fail.MatchString(lines[i]) {
				return "", i + 1, fmt.Errorf("the guest reported a failure: %q", lines[i])
			}
			if want.MatchString(lines[i]) {
				return lines[i], i + 1, nil
			}
		}
		from = len(lines)
		select {
		case <-changed:
		case <-exited:
			// One last look: the final lines may have arrived with the exit.
			if lines, _ := l.snapshot(); len(lines) > from {
				continue
			}
			return "", from, fmt.Errorf("the VMM exited before a line matched /%s/", want)
		case <-deadline:
			return "", from, fmt.Errorf("no line matched /%s/ within %v", want, timeout)
		}
	}
}

// count is the number of complete lines so far.
func (l *lineLog) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.lines)
}
