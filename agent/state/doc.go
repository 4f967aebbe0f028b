// Package state will hold meshlet's checkpoint file: versioned, written to
// a temp file and renamed, refusing a corrupt file loudly.
package state
