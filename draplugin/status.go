package draplugin

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/meshlet/meshlet/agent/enroll"
	"github.com/meshlet/meshlet/draplugin/claimstore"
)

// Report queues a status write for each mesh claim prepared for the pod:
// its devices' condition Enrolled in the claim's status.devices. It never
// blocks, and a failed write never affects the enrollment: it is retried
// a few times, then logged.
func (d *Driver) Report(pod enroll.PodRef, st enroll.RedirectionStatus) {
	for _, c := range d.deps.Claims.ForPod(pod.UID) {
		d.status.queue(claimReport{claim: c.UID, pod: pod, status: st})
	}
}

var _ enroll.StatusReporter = (*Driver)(nil)

// claimStatus writes claims' device status off the runtime hook's path.
type claimStatus struct {
	d       *Driver
	mu      sync.Mutex
	pending map[string]claimReport // latest report by claim UID
	wake    chan struct{}
}

// claimReport is the latest report of one of a claim's pods.
type claimReport struct {
	claim    string
	pod      enroll.PodRef
	status   enroll.RedirectionStatus
	attempts int
}

// statusAttempts bounds the writes of one report; statusBackoff is the
// wait after the first failure, doubled after each.
const (
	statusAttempts = 5
	statusBackoff  = 200 * time.Millisecond
	// statusWriteTimeout bounds one claim's write, so an API server that
	// hangs delays the other claims' status by no more than that.
	statusWriteTimeout = 5 * time.Second
)

func newClaimStatus(d *Driver) *claimStatus {
	return &claimStatus{d: d, pending: map[string]claimReport{}, wake: make(chan struct{}, 1)}
}

func (s *claimStatus) queue(r claimReport) {
	s.mu.Lock()
	s.pending[r.claim] = r
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *claimStatus) run(ctx context.Context) {
	logger := klog.FromContext(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.wake:
		}
		s.mu.Lock()
		batch := s.pending
		s.pending = map[string]claimReport{}
		s.mu.Unlock()
		for _, r := range batch {
			err := s.write(ctx, r)
			if err == nil || ctx.Err() != nil {
				continue
			}
			r.attempts++
			if r.attempts >= statusAttempts {
				logger.Error(err, "Writing the enrollment to a mesh claim's status; giving up", "pod", klog.KRef(r.pod.Namespace, r.pod.Name), "attempts", r.attempts)
				continue
			}
			logger.V(2).Info("Writing the enrollment to a mesh claim's status; will retry", "pod", klog.KRef(r.pod.Namespace, r.pod.Name), "err", err)
			time.AfterFunc(statusBackoff<<(r.attempts-1), func() {
				s.mu.Lock()
				_, newer := s.pending[r.claim]
				s.mu.Unlock()
				if !newer {
					s.queue(r)
				}
			})
		}
	}
}

// write sets the Enrolled condition on the claim's mesh devices: True
// while any of the pods it was prepared for is enrolled, with their IPs as
// the devices' network data; else False, with the reporting pod's state.
func (s *claimStatus) write(ctx context.Context, r claimReport) error {
	c, ok := s.d.deps.Claims.Get(r.claim)
	if !ok {
		return nil // unprepared meanwhile
	}
	cond := metav1.Condition{Type: ConditionEnrolled, Status: metav1.ConditionFalse}
	var ips []string
	var enrolled []enroll.Record
	for _, uid := range c.Pods {
		if rec, ok := s.d.node.Records.Record(uid); ok {
			enrolled = append(enrolled, rec)
			ips = append(ips, cidrs(rec.IPs)...)
		}
	}
	switch {
	case len(enrolled) > 0:
		cond.Status, cond.Reason = metav1.ConditionTrue, "Enrolled"
		cond.Message = "traffic redirected to ztunnel, which holds the pod's network namespace (" + enrolled[0].Redirection + ")"
		if len(c.Pods) > 1 {
			cond.Message = fmt.Sprintf("%d of the claim's %d pods enrolled: %s", len(enrolled), len(c.Pods), cond.Message)
		}
	case r.status == enroll.RedirectionPending:
		cond.Reason, cond.Message = "Pending", "rules in place, waiting for ztunnel to acknowledge the pod"
	default:
		cond.Reason, cond.Message = "NotEnrolled", "no pod of the claim is in the mesh"
	}
	if err := s.writeClaim(ctx, c, cond, ips); err != nil {
		return fmt.Errorf("claim %s/%s: %w", c.Namespace, c.Name, err)
	}
	return nil
}

func (s *claimStatus) writeClaim(ctx context.Context, c claimstore.Claim, cond metav1.Condition, ips []string) error {
	claims := s.d.deps.Client.ResourceV1().ResourceClaims(c.Namespace)
	ctx, cancel := context.WithTimeout(ctx, statusWriteTimeout)
	defer cancel()
	for range 3 { // conflicts: someone else updated the claim's status
		rc, err := claims.Get(ctx, c.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		if string(rc.UID) != c.UID {
			return nil // deleted and recreated: not the claim we prepared
		}
		rc = rc.DeepCopy()
		cond.ObservedGeneration = rc.Generation
		for _, dev := range c.Devices {
			st := deviceStatus(rc, s.d.cfg.DriverName, dev)
			meta.SetStatusCondition(&st.Conditions, cond)
			st.NetworkData = nil // addresses only while the pod is enrolled
			if ips != nil {
				st.NetworkData = &resourceapi.NetworkDeviceData{IPs: ips}
			}
		}
		_, err = claims.UpdateStatus(ctx, rc, metav1.UpdateOptions{FieldManager: "meshlet"})
		if apierrors.IsConflict(err) {
			continue
		}
		return err
	}
	return fmt.Errorf("status update conflicted 3 times")
}

// deviceStatus finds (or adds) the claim's status entry of one device.
func deviceStatus(rc *resourceapi.ResourceClaim, driver string, dev claimstore.AllocatedDevice) *resourceapi.AllocatedDeviceStatus {
	var share *string
	if dev.ShareID != "" {
		share = &dev.ShareID
	}
	for i := range rc.Status.Devices {
		st := &rc.Status.Devices[i]
		if st.Driver == driver && st.Pool == dev.Pool && st.Device == dev.Device && ptrEqual(st.ShareID, share) {
			return st
		}
	}
	rc.Status.Devices = append(rc.Status.Devices, resourceapi.AllocatedDeviceStatus{Driver: driver, Pool: dev.Pool, Device: dev.Device, ShareID: share})
	return &rc.Status.Devices[len(rc.Status.Devices)-1]
}

func ptrEqual(a, b *string) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }

// cidrs writes addresses as the single-address prefixes networkData takes.
func cidrs(ips []netip.Addr) []string {
	out := make([]string, 0, len(ips))
	for _, ip := range ips {
		out = append(out, netip.PrefixFrom(ip, ip.BitLen()).String())
	}
	return out
}
