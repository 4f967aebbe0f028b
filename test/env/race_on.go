//go:build race

package env

// raceDetector: this test binary runs with the race detector, and so does
// the meshlet daemon it builds.
const raceDetector = true
