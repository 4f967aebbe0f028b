// Package nriplugin will hold meshlet's NRI plugin: it hooks the container
// runtime's pod-sandbox lifecycle (RunPodSandbox → Enroll, StopPodSandbox →
// Release, RemovePodSandbox → Forget, Synchronize → Reconcile), gates app
// container creation for pods that must be meshed, and reconnects when the
// runtime restarts. It lands with the NRI issue.
package nriplugin
