// Package latency reports per-operation latency quantiles from a
// benchmark, next to the mean that testing.B reports: latency targets
// are p50/p99, and a mean hides the tail.
package latency

import (
	"slices"
	"testing"
	"time"
)

// Report stops the timer and reports p50 and p99 of lat in microseconds.
func Report(b *testing.B, lat []time.Duration) {
	b.StopTimer()
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2])/1e3, "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100])/1e3, "p99-µs")
}
