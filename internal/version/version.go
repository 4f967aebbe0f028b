// Package version names the running meshlet build.
package version

import "runtime/debug"

// Version is set at link time (-X github.com/meshlet/meshlet/internal/version.Version=v1.2.3);
// without it, the module version or the VCS revision the Go toolchain
// recorded is used, else "dev".
var Version = ""

// String is the build's version.
func String() string {
	if Version != "" {
		return Version
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "dev"
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" && len(s.Value) >= 12 {
			return "dev-" + s.Value[:12]
		}
	}
	return "dev"
}
