// Package install keeps meshlet-cni chained in the node's CNI config, for
// runtimes without NRI: the daemon calls New, then Run for as long as the
// CNI fallback is on, and reads Installed for readiness.
//
// # What the runtime uses
//
// The primary config is chosen as containerd, CRI-O and libcni do: the
// .conf, .conflist and .json files of ConfDir in lexical order, the
// first that loads (a conflist with at least one plugin; a single-plugin
// .conf or .json with a "type"). Files that do not load are skipped and
// the reason logged. (CRI-O skips them too; containerd's go-cni instead
// fails the whole load and keeps its previous config, so with containerd
// a broken file sorting first is a node problem meshlet cannot fix.) A
// conflist whose plugins come partly from the directory named after the
// network (CNI 1.1) is refused: meshlet-cni would not run last. A file
// that does not load and changed within the last second is taken to be
// mid-write: the pass waits for it rather than chaining into the next
// file for an instant.
//
// # What Install writes
//
// meshlet's entry ({"type": "meshlet-cni", "agentSocket", "agentTimeout",
// "excludeNamespaces"}) goes last in the primary's plugins, replacing any
// earlier meshlet-cni entry wherever it was. The other plugins' JSON is
// kept as it is (keys, their order, number literals); the file is
// re-indented with two spaces. A single-plugin .conf or .json becomes
// <stem>.conflist ({cniVersion, name, plugins: [the plugin without name
// and cniVersion, meshlet]}, the entry recording "convertedFrom") and the
// old file is removed once the new one is in place. With OwnConflist the
// primary is left alone and OwnConflistName is written instead, a copy of
// the primary with meshlet chained and the primary's file mode; Install
// fails, naming the file, when another config sorts before it (the
// runtime would not use ours).
//
// Every write is a temporary file in the same directory (".meshlet-…
// .tmp-…", which no runtime loads), synced, given the mode of the file
// it replaces, renamed, and the directory synced; just before the rename
// the source file is compared with what was read, so that a concurrent
// rewrite by the primary CNI is not undone. The binary is copied to
// BinDir/meshlet-cni (0755) the same way, and only when its content
// differs: re-asserting costs no churn, and a running plugin is never
// overwritten in place. A pass that finds everything right writes
// nothing.
//
// # Run
//
// Run watches ConfDir and BinDir (fsnotify) and re-asserts within a
// debounce of 20 ms of any change, well within the promised second, plus
// a resync every ResyncInterval (30 s) for lost events. A directory that
// does not exist yet is retried every second; without any watcher (the
// inotify instance limit) Run polls every 500 ms. If another writer
// keeps undoing meshlet's entry (more than 10 writes in 10 s), Run backs
// off (250 ms doubling to 5 s), logs each back-off with the file name,
// and counts it in Stats.Backoffs: it never spins. Config.OnReassert
// observes each re-assertion's trigger and latency.
//
// Only one Installer may run per node (the daemon's node lock): two with
// different settings would fight, and the loop guard would slow both.
//
// # Uninstall
//
// Uninstall removes exactly what Install added (see its doc). Whether to
// call it when the daemon stops is the daemon's decision: an upgrade must
// not (pods would start without the mesh between the old daemon leaving
// and the new one arriving), a removal of meshlet from the node should.
// Note that after Uninstall removes the binary, a runtime that tears pods
// down with the config they were created with (CRI-O caches it) fails
// their DEL until the pods are gone: uninstall on a drained node, or keep
// the binary by calling Uninstall on an Installer whose Config has
// PluginBinary empty.
//
// The code is portable, but the promise of a second holds where fsnotify
// reports writes into a watched directory's files (Linux's inotify); with
// kqueue (BSD, macOS) an in-place rewrite is only seen at the resync.
package install
