package wire

import (
	"encoding/json"
	"reflect"
	"testing"
)

// FuzzDecodeRequest: the agent's parser of what the plugin sends never
// panics, and what it accepts is valid and survives a round trip.
func FuzzDecodeRequest(f *testing.F) {
	b, _ := json.Marshal(validAdd())
	f.Add(b)
	f.Add([]byte(`{"version":1,"command":"DEL","containerID":"c","ifName":"eth0","pod":{"namespace":"","name":"","uid":""}}`))
	f.Add([]byte(`{"version":1,"command":"ADD","command":"DEL"}`))
	f.Add([]byte(`{"a":[{"b":1,"b":2}]}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := DecodeRequest(b)
		if err != nil {
			return
		}
		if err := r.Validate(); err != nil {
			t.Fatalf("accepted an invalid request: %v", err)
		}
		out, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		again, err := DecodeRequest(out)
		if err != nil || !reflect.DeepEqual(again, r) {
			t.Fatalf("round trip: %+v, %v; want %+v", again, err, r)
		}
	})
}

// FuzzDecodeResponse: the plugin's parser of the agent's answer never
// panics and accepts only valid answers.
func FuzzDecodeResponse(f *testing.F) {
	f.Add([]byte(`{"version":1,"outcome":"enrolled","reason":"pod-label"}`))
	f.Add([]byte(`{"version":1,"outcome":"failed","message":"x","message":"y"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := DecodeResponse(b)
		if err == nil {
			if err := r.Validate(); err != nil {
				t.Fatalf("accepted an invalid response: %v", err)
			}
		}
	})
}
