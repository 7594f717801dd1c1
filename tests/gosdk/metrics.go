package main

// metrics.go owns the check of the metrics file the SDK configured (PUT /metrics): Osprey
// appends a JSON line of every counter (GET /metrics's shape, docs/api/metrics.md) per interval,
// on FlushMetrics and at stop.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"time"
)

// metricsLine is the part of a metrics line this check reads.
type metricsLine struct {
	UTCTimestampMs *uint64 `json:"utc_timestamp_ms"`
	Drives         []struct {
		DriveID  string `json:"drive_id"`
		Requests uint64 `json:"requests"`
		IOErrors uint64 `json:"io_errors"`
	} `json:"drives"`
}

// driveRequests reads the metrics file at p: every complete line must be a JSON object with a
// timestamp; it returns the line count and the last line's request and error counts of driveID.
func driveRequests(p, driveID string) (lines int, requests, ioErrors uint64, err error) {
	text, err := os.ReadFile(p)
	if err != nil {
		return 0, 0, 0, err
	}
	// Only complete lines: Osprey may be appending one right now.
	text = text[:bytes.LastIndexByte(text, '\n')+1]
	found := false
	for _, raw := range bytes.Split(text, []byte("\n")) {
		if len(bytes.TrimSpace(raw)) == 0 {
			continue
		}
		var m metricsLine
		if err := json.Unmarshal(raw, &m); err != nil {
			return lines, 0, 0, fmt.Errorf("line %d of %s is not a metrics object: %v", lines+1, p, err)
		}
		if m.UTCTimestampMs == nil {
			return lines, 0, 0, fmt.Errorf("line %d of %s has no utc_timestamp_ms", lines+1, p)
		}
		lines++
		found = false
		for _, d := range m.Drives {
			if d.DriveID == driveID {
				requests, ioErrors, found = d.Requests, d.IOErrors, true
			}
		}
	}
	if lines > 0 && !found {
		return lines, 0, 0, fmt.Errorf("the last line of %s has no drive %q", p, driveID)
	}
	return lines, requests, ioErrors, nil
}

// expectDriveMetrics waits up to `limit` for the metrics file to show requests completed on
// driveID with no I/O error, and prints what it read.
func expectDriveMetrics(p, driveID string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		lines, requests, ioErrors, err := driveRequests(p, driveID)
		if err != nil {
			return err
		}
		if ioErrors != 0 {
			return fmt.Errorf("%s: drive %q has %d I/O errors", p, driveID, ioErrors)
		}
		if requests > 0 {
			fmt.Printf("gosdk:   metrics: %d lines; drive %q: %d requests, no I/O error\n",
				lines, driveID, requests)
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: %d lines, none with requests on drive %q", p, lines, driveID)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
