package wire

import (
	"testing"

	"github.com/meshlet/meshlet/internal/importcheck"
)

// TestStandardLibraryOnly: the plugin binary links this package, and must
// stay small.
func TestStandardLibraryOnly(t *testing.T) {
	importcheck.StandardLibraryOnly(t, "the CNI fallback's wire takes the standard library only", "github.com/meshlet/meshlet/internal/strictjson", "github.com/meshlet/meshlet/internal/seqpacket")
}
