package debug

import (
	"fmt"
	"net/http"
	"runtime"
	"runtime/pprof"
	"strconv"
)

// profiles are the runtime's profiles the debug socket serves, at
// /debug/pprof/<name>: what holds memory (heap: live objects, allocs:
// everything allocated since start), and what every goroutine is doing.
var profiles = []string{"heap", "allocs", "goroutine"}

// serveProfile writes the runtime's profile name: gzipped protobuf for
// go tool pprof, or text with ?debug=1 (goroutine: ?debug=2, every stack
// in full). ?gc=1 collects garbage first, so a heap profile shows only
// what is live.
func serveProfile(name string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		debug := 0
		if v := r.URL.Query().Get("debug"); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 || n > 2 {
				http.Error(w, fmt.Sprintf("debug=%q: want 0, 1 or 2", v), http.StatusBadRequest)
				return
			}
			debug = n
		}
		if r.URL.Query().Get("gc") == "1" {
			runtime.GC()
		}
		if debug == 0 {
			w.Header().Set("Content-Type", "application/octet-stream")
			w.Header().Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", name+".pb.gz"))
		} else {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		}
		if err := pprof.Lookup(name).WriteTo(w, debug); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
		}
	}
}
