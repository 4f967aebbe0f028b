// Package draplugin will hold meshlet's DRA kubelet plugin: a `mesh` device
// advertised in a ResourceSlice only while the node can enroll pods, and
// Prepare/Unprepare of ResourceClaims carrying validated per-pod mesh
// settings. Not built yet: today pods join the mesh through
// their labels only.
package draplugin
