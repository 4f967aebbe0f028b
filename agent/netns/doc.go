// Package netns opens and holds Linux network namespaces as file
// descriptors and runs code inside them safely.
//
// A held namespace stays alive as long as its fd is open, even after the
// runtime removes the bind mount: that is what lets meshlet replay every
// enrolled pod to a reconnecting ztunnel, and remove rules from a pod whose
// path is already gone.
//
// RunIn never leaves the calling goroutine's OS thread in another namespace:
// it switches on a dedicated, locked thread and, if switching back fails,
// lets the Go runtime discard that thread instead of returning it to the
// pool. A Handle lends its descriptor only for the duration of WithFd.
package netns
