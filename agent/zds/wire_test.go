package zds_test

import (
	"bytes"
	"encoding/hex"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/meshlet/meshlet/agent/zds/zdspb"
)

// TestWireBytes pins the encoding a stock ztunnel expects, byte for byte,
// independently of the generated code: a renumbered field in zds.proto
// would pass every round-trip test and still break ztunnel.
func TestWireBytes(t *testing.T) {
	cases := []struct {
		name string
		msg  proto.Message
		hex  string
	}{
		// ZdsHello.version = 1 (V1): field 1 varint.
		{"hello v1", &zdspb.ZdsHello{Version: zdspb.Version_V1}, "0801"},
		// WorkloadRequest.add (1) → AddWorkload{uid (1) "u", workload_info (2) {name 1, namespace 2, service_account 3}}.
		{"add", &zdspb.WorkloadRequest{Payload: &zdspb.WorkloadRequest_Add{Add: &zdspb.AddWorkload{
			Uid: "u", WorkloadInfo: &zdspb.WorkloadInfo{Name: "n", Namespace: "s", ServiceAccount: "a"}}}},
			"0a0e" + "0a0175" + "1209" + "0a016e" + "120173" + "1a0161"},
		// WorkloadRequest.del (2) → DelWorkload{uid (2!) "u"}.
		{"del", &zdspb.WorkloadRequest{Payload: &zdspb.WorkloadRequest_Del{Del: &zdspb.DelWorkload{Uid: "u"}}}, "1203" + "120175"},
		// WorkloadRequest.snapshot_sent (3) → empty message.
		{"snapshot sent", &zdspb.WorkloadRequest{Payload: &zdspb.WorkloadRequest_SnapshotSent{SnapshotSent: &zdspb.SnapshotSent{}}}, "1a00"},
		// WorkloadRequest.keep (5) → KeepWorkload{uid (1) "u"}.
		{"keep", &zdspb.WorkloadRequest{Payload: &zdspb.WorkloadRequest_Keep{Keep: &zdspb.KeepWorkload{Uid: "u"}}}, "2a03" + "0a0175"},
		// WorkloadResponse.ack (1) → Ack{error (1)}.
		{"ack", &zdspb.WorkloadResponse{Payload: &zdspb.WorkloadResponse_Ack{Ack: &zdspb.Ack{}}}, "0a00"},
		{"nack", &zdspb.WorkloadResponse{Payload: &zdspb.WorkloadResponse_Ack{Ack: &zdspb.Ack{Error: "x"}}}, "0a03" + "0a0178"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := proto.MarshalOptions{Deterministic: true}.Marshal(c.msg)
			if err != nil {
				t.Fatal(err)
			}
			want, _ := hex.DecodeString(c.hex)
			if !bytes.Equal(got, want) {
				t.Fatalf("encoding %x, want %x", got, want)
			}
		})
	}
}
