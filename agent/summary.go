package agent

import (
	"time"

	"github.com/meshlet/meshlet/agent/health"
	"github.com/meshlet/meshlet/agent/kube"
	"github.com/meshlet/meshlet/agent/meshready"
	"github.com/meshlet/meshlet/agent/nodestatus"
	"github.com/meshlet/meshlet/agent/zds"
	"github.com/meshlet/meshlet/draplugin"
	"github.com/meshlet/meshlet/draplugin/claimstore"
	"github.com/meshlet/meshlet/internal/version"
)

// summarize is the node's state for meshlet status (/debug/status); the
// debug handler adds the node, the revision and the pod counts.
func summarize(cfg Config, started time.Time, ready *health.Readiness, mesh func() meshready.State, source *modeSource, server *zds.Server, api *apiClients,
	driver *draplugin.Driver, claims *claimstore.Store, nr *kube.NodeReadiness) nodestatus.Summary {
	s := nodestatus.Summary{Version: version.String(), Started: started,
		RuntimeHook: nodestatus.RuntimeHook{Mode: source.current(), Connected: source.Connected()},
		Ztunnel:     nodestatus.Ztunnel{Socket: cfg.ZtunnelSocket, Connections: server.Connections(), RefusedPods: server.Refused()}}
	m := mesh()
	s.Mesh = nodestatus.Mesh{Ready: m.Ready, Reason: m.Reason, Message: m.Message}
	if detail, err := ready.Check(); err != nil {
		s.Detail = err.Error()
	} else {
		s.Ready, s.Detail = true, detail
	}
	if err := source.notReady(); err != nil {
		s.RuntimeHook.Detail = err.Error()
	}
	if api != nil {
		s.API.Enabled = true
		if err := api.synced(); err != nil {
			s.API.Error = err.Error()
		} else {
			s.API.Synced = true
		}
	}
	if driver != nil {
		taint := driver.Taint()
		s.DRA = &nodestatus.DRA{Driver: cfg.DRA.DriverName, DeviceReady: taint == "", Taint: taint, PreparedClaims: claims.Len()}
	}
	if nr != nil {
		st, published, err := nr.Published()
		s.NodeReadiness = &nodestatus.NodeReadiness{Taint: cfg.NodeTaint, Condition: cfg.NodeCondition, Published: published, Ready: st.Ready, Reason: st.Reason}
		if err != nil {
			s.NodeReadiness.Error = err.Error()
		}
	}
	return s
}
