// Package zds is the agent side of ztunnel's ZDS protocol
// (istio.workload.zds): meshlet listens on a SOCK_SEQPACKET Unix socket and
// ztunnel connects to it.
//
// Wire facts kept here, for compatibility with a stock ztunnel: one datagram
// is one protobuf message with no length prefix and under 1024 bytes;
// ztunnel speaks first with ZdsHello{V1}; the agent then replays every
// workload it holds (Add with the netns fd as SCM_RIGHTS), names with Keep
// the pods a previous agent handed over that this one has not adopted yet
// (it holds no netns of theirs), and ends with SnapshotSent; every request
// gets one Ack, in order, and a non-empty Ack.error is a NACK. New Adds go
// to the newest connection; Dels go to every connection.
//
// ztunnel keeps its proxies across connections and drains, at
// SnapshotSent, every one the snapshot did not name. So after a restart
// the snapshot waits (bounded) until the agent has listed the runtime's
// pods: an agent that replayed before it knew its pods would reset every
// mesh connection on the node.
//
// Acks carry no request id: requests on a connection take turns, each
// holding it until its ack. A caller waits for its turn and its ack only
// until its own deadline (a runtime hook must answer in time); an ack that
// comes later is still matched to its request, and only a connection
// whose ack is later than the ack timeout, or malformed, is closed (ztunnel
// reconnects and gets a full replay). A misbehaving connection never
// affects the others or the registry of workloads.
package zds
