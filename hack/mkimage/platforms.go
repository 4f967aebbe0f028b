package main

import (
	"fmt"
	"slices"
	"strings"
)

// parsePlatforms reads -platforms: a comma-separated subset of Platforms,
// each as linux/<arch> or its full form (linux/arm64/v8). The result keeps
// Platforms' order, so the index does not depend on how the flag was written.
func parsePlatforms(s string) ([]Platform, error) {
	want := map[string]bool{}
	for name := range strings.SplitSeq(s, ",") {
		name = strings.TrimSpace(name)
		i := slices.IndexFunc(Platforms, func(p Platform) bool { return name == p.String() || name == "linux/"+p.Arch })
		if i < 0 {
			return nil, fmt.Errorf("unknown platform %q (known: %s)", name, platformList(Platforms))
		}
		if want[Platforms[i].Arch] {
			return nil, fmt.Errorf("platform %q given twice", name)
		}
		want[Platforms[i].Arch] = true
	}
	var out []Platform
	for _, p := range Platforms {
		if want[p.Arch] {
			out = append(out, p)
		}
	}
	return out, nil
}

// platformList is the flag's form of plats.
func platformList(plats []Platform) string {
	names := make([]string, len(plats))
	for i, p := range plats {
		names[i] = p.String()
	}
	return strings.Join(names, ",")
}
