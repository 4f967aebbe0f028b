// Package startpages lets a long-running process give back the pages of
// its own binary that only its start-up needed.
//
// A Go binary's package initialisers run once, from code spread over the
// whole text segment, and the kernel maps 64 KiB of a file around every
// page fault (fault-around): by the time meshlet serves, most of its
// binary is mapped, tens of MiB of VmRSS that the rest of its life does
// not touch. Release drops the mappings of the binary's read-only segments
// (code, read-only data, function tables); what the process runs next
// is mapped again from the page cache on first use, a minor fault each
// 64 KiB. Writable segments (package variables), and read-only ones that
// hold pages of their own (relocated by the dynamic loader, patched by a
// uprobe), are never touched.
//
// The page cache keeps the pages until the kernel needs the memory, and a
// container's memory cgroup is charged for them either way; what changes
// is that they are no longer pinned by a mapping, so reclaim takes them
// first, and VmRSS shows what the process uses.
package startpages
