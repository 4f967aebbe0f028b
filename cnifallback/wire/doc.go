// Package wire is the protocol between the meshlet-cni plugin and the
// agent: one request and one response per connection, each a JSON
// document in one message on a Unix SOCK_SEQPACKET socket. Decoding is
// strict (unknown or repeated fields, another version, a bad value: refused
// with the field's name). Standard library only, to keep the plugin binary
// small.
package wire
