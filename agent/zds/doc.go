// Package zds is the agent side of ztunnel's ZDS protocol
// (istio.workload.zds): meshlet listens on a SOCK_SEQPACKET Unix socket and
// ztunnel connects to it.
//
// Wire facts kept here, for compatibility with a stock ztunnel: one datagram
// is one protobuf message with no length prefix and under 1024 bytes;
// ztunnel speaks first with ZdsHello{V1}; the agent then replays every
// workload it holds (Add with the netns fd as SCM_RIGHTS: meshlet holds the
// netns of every enrolled pod, so it never needs the protocol's Keep) and
// ends with SnapshotSent; every request gets one Ack, in
// order, and a non-empty Ack.error is a NACK. New Adds go to the newest
// connection; Dels go to every connection.
//
// Acks carry no request id, so a connection whose ack is late or malformed
// can no longer be trusted: the server closes it and ztunnel reconnects,
// getting a full replay. A misbehaving connection never affects the others
// or the registry of workloads.
package zds
