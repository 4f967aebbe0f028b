// Package draplugin will hold meshlet's DRA kubelet plugin: one shared
// `mesh` device per node in a ResourceSlice, tainted while the node cannot
// enroll pods, and Prepare/Unprepare of ResourceClaims carrying validated per-pod mesh
// settings. Only the settings' API is built (apis/v1alpha1: MeshConfig,
// strictly decoded, with field paths in every refusal); the kubelet plugin
// is not, so today pods join the mesh through their labels only.
package draplugin
