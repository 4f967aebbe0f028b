//go:build !linux

package startpages

// Release does nothing outside Linux.
func Release() (uint64, error) { return 0, nil }

// Resident is only known on Linux.
func Resident() (anon, file uint64, err error) { return 0, 0, nil }
