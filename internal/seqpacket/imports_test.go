package seqpacket

import (
	"testing"

	"github.com/meshlet/meshlet/internal/importcheck"
)

// TestStandardLibraryOnly: meshlet-cni and meshlet-gate link this package,
// and must stay small.
func TestStandardLibraryOnly(t *testing.T) {
	importcheck.StandardLibraryOnly(t, "the seqpacket framing takes the standard library only")
}
