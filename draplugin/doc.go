// Package draplugin is meshlet's DRA kubelet plugin (driver
// mesh.meshlet.dev). It publishes one ResourceSlice pool per node holding
// one shared `mesh` device (or N plain slots for clusters without
// DRAConsumableCapacity), tainted NoSchedule while the node cannot enroll
// pods, so the scheduler places a pod that asks for the mesh only where
// the mesh is ready.
//
// Prepare validates a claim's opaque meshlet.dev/v1alpha1 MeshConfig
// (apis/v1alpha1) and refuses pods that cannot be meshed, then stores the
// claim (package claimstore, on disk before Prepare returns). The store is a
// source of per-pod settings for the enrollment core, ahead of the pod's
// annotations, and marks the pod must-mesh; the runtime hook enrolls it.
// The enrollment result is written back to the claim's status.devices.
package draplugin
