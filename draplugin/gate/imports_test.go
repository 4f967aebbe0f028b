package gate

import (
	"testing"

	"github.com/meshlet/meshlet/internal/importcheck"
)

// TestStandardLibraryOnly: meshlet-gate links this package and is copied
// to every node: it must stay small.
func TestStandardLibraryOnly(t *testing.T) {
	importcheck.StandardLibraryOnly(t, "the gate takes the standard library only", "github.com/meshlet/meshlet/internal/strictjson", "github.com/meshlet/meshlet/internal/seqpacket")
}
