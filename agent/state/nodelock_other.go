//go:build !linux

package state

import "context"

// NodeLockFile is the lock, in the state directory, that the meshlet
// serving the node holds for as long as it runs.
const NodeLockFile = "meshlet.lock"

// AcquireNodeLock is a no-op where meshlet cannot run.
func AcquireNodeLock(context.Context, string, string, func()) (func(), error) { return func() {}, nil }
