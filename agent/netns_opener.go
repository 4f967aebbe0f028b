package agent

import (
	"github.com/meshlet/meshlet/agent/enroll"
	"github.com/meshlet/meshlet/agent/netns"
)

// netnsOpener adapts agent/netns to the core's NetnsOpener port.
type netnsOpener struct{}

var (
	_ enroll.NetnsOpener = netnsOpener{}
	_ enroll.Netns       = (*netns.Handle)(nil)
)

func (netnsOpener) Open(path string) (enroll.Netns, error) {
	h, err := netns.Open(path)
	if err != nil {
		return nil, err
	}
	return h, nil
}
