package kube_test

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshlet/meshlet/agent/kube"
)

// TestConfigMapWatch: each watched ConfigMap's creation, change and
// deletion is reported, and Get reads it as it is (nil once deleted);
// another ConfigMap in the same namespace is neither reported nor read.
func TestConfigMapWatch(t *testing.T) {
	c := admin(t)
	ns := namespace(t, c, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var changes [2]atomic.Int32
	w := kube.WatchConfigMaps(c, []kube.ObjectRef{{Namespace: ns, Name: "first"}, {Namespace: ns, Name: "second"}},
		func(i int) { changes[i].Add(1) })
	w.Start(ctx)
	syncCtx, cancelSync := context.WithTimeout(ctx, 30*time.Second)
	defer cancelSync()
	must(t, w.WaitForSync(syncCtx))
	if w.Get(0) != nil || w.Get(1) != nil || w.Len() != 2 {
		t.Fatal("ConfigMaps that do not exist read as existing")
	}
	cms := c.CoreV1().ConfigMaps(ns)
	_, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "other"}, Data: map[string]string{"a": "b"}}, metav1.CreateOptions{})
	must(t, err)
	second, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "second"},
		Data: map[string]string{"settings.yaml": "x"}, BinaryData: map[string][]byte{"blob": {1}}}, metav1.CreateOptions{})
	must(t, err)
	eventually(t, "second created", func() bool { got := w.Get(1); return got != nil && got.ResourceVersion == second.ResourceVersion })
	if got := w.Get(1); !slices.Equal(got.Keys, []string{"blob", "settings.yaml"}) || got.Data["settings.yaml"] != "x" || got.UID != second.UID {
		t.Fatalf("second: %+v", got)
	}
	second.Data["settings.yaml"] = "y"
	second, err = cms.Update(ctx, second, metav1.UpdateOptions{})
	must(t, err)
	eventually(t, "second changed", func() bool { got := w.Get(1); return got != nil && got.Data["settings.yaml"] == "y" })
	must(t, cms.Delete(ctx, "second", metav1.DeleteOptions{}))
	eventually(t, "second deleted", func() bool { return w.Get(1) == nil && changes[1].Load() >= 3 })
	if n := changes[0].Load(); n != 0 || w.Get(0) != nil {
		t.Fatalf("first: %d changes reported, Get %+v; want none (only other ConfigMaps changed)", n, w.Get(0))
	}
}
