package wire

import (
	"encoding/json"
	"errors"
	"net/netip"
	"reflect"
	"strings"
	"testing"
)

func validAdd() *Request {
	return &Request{Version: Version, Command: CommandAdd, ContainerID: "c0ffee", Netns: "/var/run/netns/cni-1", IfName: "eth0",
		Pod: Pod{Namespace: "shop", Name: "cart", UID: "5b1c"}, IPs: []netip.Addr{netip.MustParseAddr("10.244.0.7"), netip.MustParseAddr("fd00::7")}}
}

func TestRequestRoundTrip(t *testing.T) {
	want := validAdd()
	b, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeRequest(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("decoded %+v, want %+v", got, want)
	}
	del := &Request{Version: Version, Command: CommandDel, ContainerID: "c0ffee", IfName: "eth0"}
	b, _ = json.Marshal(del)
	if _, err := DecodeRequest(b); err != nil {
		t.Fatalf("a DEL without netns or pod: %v, want accepted (the runtime may have lost both)", err)
	}
}

// TestRequestRefused: every bad request is refused with the field's name;
// all problems of one request are reported together.
func TestRequestRefused(t *testing.T) {
	mut := func(f func(*Request)) string {
		r := validAdd()
		f(r)
		b, _ := json.Marshal(r)
		return string(b)
	}
	for name, c := range map[string]struct {
		msg  string
		want []string
	}{
		"version":            {mut(func(r *Request) { r.Version = 2 }), []string{"version: 2, want 1"}},
		"command":            {mut(func(r *Request) { r.Command = "VERSION" }), []string{`command: "VERSION"`}},
		"container id":       {mut(func(r *Request) { r.ContainerID = "" }), []string{"containerID"}},
		"ifname":             {mut(func(r *Request) { r.IfName = "eth0/../x" }), []string{"ifName"}},
		"netns missing":      {mut(func(r *Request) { r.Netns = "" }), []string{"netns: required for ADD"}},
		"netns relative":     {mut(func(r *Request) { r.Netns = "run/netns/x" }), []string{"netns", "absolute"}},
		"netns unclean":      {mut(func(r *Request) { r.Netns = "/var/run/../netns/x" }), []string{"netns"}},
		"pod uid":            {mut(func(r *Request) { r.Pod.UID = "" }), []string{"pod.uid", "K8S_POD_"}},
		"all pod fields":     {mut(func(r *Request) { r.Pod = Pod{} }), []string{"pod.uid", "pod.name", "pod.namespace"}},
		"too many ips":       {mut(func(r *Request) { r.IPs = make([]netip.Addr, 17); r.IPs[0] = netip.MustParseAddr("10.0.0.1") }), []string{"ips: 17 addresses"}},
		"zoned ip":           {mut(func(r *Request) { r.IPs = []netip.Addr{netip.MustParseAddr("fe80::1%eth0")} }), []string{"ips[0]"}},
		"unparsable ip":      {`{"version":1,"command":"ADD","containerID":"c","netns":"/n","ifName":"eth0","pod":{"namespace":"a","name":"b","uid":"c"},"ips":["10.0.0.300"]}`, []string{"malformed"}},
		"unknown field":      {`{"version":1,"command":"ADD","containerID":"c","netns":"/n","ifName":"eth0","pod":{"namespace":"a","name":"b","uid":"c"},"podIP":"x"}`, []string{"unknown field", "podIP"}},
		"unknown pod field":  {`{"version":1,"command":"ADD","containerID":"c","netns":"/n","ifName":"eth0","pod":{"namespace":"a","name":"b","uid":"c","labels":{}}}`, []string{"unknown field", "labels"}},
		"repeated field":     {`{"version":1,"command":"DEL","command":"ADD","containerID":"c","netns":"/n","ifName":"eth0","pod":{"namespace":"a","name":"b","uid":"c"}}`, []string{"command: given twice"}},
		"repeated pod field": {`{"version":1,"command":"ADD","containerID":"c","netns":"/n","ifName":"eth0","pod":{"namespace":"a","uid":"x","name":"b","uid":"c"}}`, []string{"uid: given twice"}},
		"trailing data":      {mut(func(*Request) {}) + `{}`, []string{"data after"}},
		"wrong type":         {`{"version":"1"}`, []string{"malformed"}},
		"not json":           {`ADD`, []string{"malformed"}},
		"oversized":          {`{"containerID":"` + strings.Repeat("x", MaxMessageSize) + `"}`, []string{"at most"}},
	} {
		t.Run(name, func(t *testing.T) {
			r, err := DecodeRequest([]byte(c.msg))
			if err == nil {
				t.Fatalf("accepted %+v", r)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
	var fe *FieldError
	r := validAdd()
	r.Pod.Name = ""
	if err := r.Validate(); !errors.As(err, &fe) || fe.Field != "pod.name" {
		t.Fatalf("Validate = %v, want a *FieldError for pod.name", err)
	}
}

func TestResponse(t *testing.T) {
	for _, ok := range []string{
		`{"version":1,"outcome":"enrolled","reason":"pod-label"}`,
		`{"version":1,"outcome":"skipped","reason":"not-selected"}`,
		`{"version":1,"outcome":"failed","reason":"ztunnel","message":"no ztunnel connected"}`,
	} {
		if _, err := DecodeResponse([]byte(ok)); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
	for bad, want := range map[string]string{
		`{"version":1,"outcome":"maybe"}`:             `outcome: "maybe"`,
		`{"version":3,"outcome":"enrolled"}`:          "version: 3",
		`{"version":1,"outcome":"enrolled","x":1}`:    "unknown field",
		`{"version":1,"outcome":"enrolled"} trailing`: "data after",
	} {
		if _, err := DecodeResponse([]byte(bad)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error containing %q", bad, err, want)
		}
	}
}
