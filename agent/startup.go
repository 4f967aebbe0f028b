package agent

import (
	"runtime/debug"

	"k8s.io/klog/v2"

	"github.com/meshlet/meshlet/internal/startpages"
)

// releaseStartup gives back, once start-up is over (the runtime listed its
// pods and they are adopted), the memory only start-up needed: the heap
// it left behind, and the mappings of the binary's code and read-only
// data that the package initialisers touched (internal/startpages). What
// serving needs is mapped again on first use.
func releaseStartup(logger klog.Logger) {
	anon, file, _ := startpages.Resident()
	debug.FreeOSMemory()
	if _, err := startpages.Release(); err != nil {
		logger.Info("Could not release the binary's start-up pages: they stay mapped", "err", err)
		return
	}
	anonAfter, fileAfter, _ := startpages.Resident()
	logger.V(2).Info("Released the memory only start-up needed", "rssAnonBefore", anon, "rssFileBefore", file,
		"rssAnon", anonAfter, "rssFile", fileAfter)
}
