package netns

// SetThreadCookie stands in f for the kernel's cookie read until the
// returned func is called.
func SetThreadCookie(f func() (uint64, error)) (restore func()) {
	old := threadCookie
	threadCookie = f
	return func() { threadCookie = old }
}
