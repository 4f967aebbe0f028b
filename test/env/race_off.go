//go:build !race

package env

// raceDetector: this binary runs without the race detector, and so does
// the meshlet daemon it builds (benchmarks, the soak, the demo).
const raceDetector = false
