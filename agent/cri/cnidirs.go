package cri

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// CNIDirs are where the runtime reads its CNI configuration from and
// looks its plugins up, as it reports them.
type CNIDirs struct {
	ConfDir string
	BinDirs []string
}

// CNIDirs asks the runtime where it keeps CNI (CRI Status, verbose).
// containerd reports its CRI plugin's cni section (1.7: binDir, 2.x:
// binDirs); a runtime that reports none (CRI-O): ok is false. err: the
// runtime did not answer.
func (l *Lister) CNIDirs(ctx context.Context) (dirs CNIDirs, ok bool, err error) {
	resp, err := l.client.Status(ctx, &runtimeapi.StatusRequest{Verbose: true})
	if err != nil {
		return CNIDirs{}, false, fmt.Errorf("CRI status of %s: %w", l.endpoint, err)
	}
	dirs, ok = parseCNIDirs(resp.GetInfo()["config"])
	return dirs, ok, nil
}

// parseCNIDirs reads the cni section of containerd's verbose status
// "config": absolute directories only, else ok is false.
func parseCNIDirs(config string) (CNIDirs, bool) {
	var c struct {
		CNI struct {
			BinDir  string   `json:"binDir"`
			BinDirs []string `json:"binDirs"`
			ConfDir string   `json:"confDir"`
		} `json:"cni"`
	}
	if json.Unmarshal([]byte(config), &c) != nil || !filepath.IsAbs(c.CNI.ConfDir) {
		return CNIDirs{}, false
	}
	dirs := CNIDirs{ConfDir: c.CNI.ConfDir}
	for _, d := range append(c.CNI.BinDirs, c.CNI.BinDir) {
		if filepath.IsAbs(d) {
			dirs.BinDirs = append(dirs.BinDirs, d)
		}
	}
	return dirs, len(dirs.BinDirs) > 0
}
