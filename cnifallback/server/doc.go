// Package server will hold the agent side of the CNI fallback protocol,
// translating CNI ADD/DEL into the core's Enroll/Release.
package server
