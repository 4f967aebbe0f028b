package kube

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	listersv1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
)

// ObjectRef names one namespaced object.
type ObjectRef struct{ Namespace, Name string }

func (r ObjectRef) String() string { return r.Namespace + "/" + r.Name }

// ConfigMap is what a ConfigMapWatch reports of one ConfigMap.
type ConfigMap struct {
	UID             types.UID
	ResourceVersion string
	Data            map[string]string
	// Keys are every key of data and binaryData, sorted.
	Keys []string
}

// ConfigMapWatch watches a few named ConfigMaps, each through an informer
// of its own that lists and watches that one object (a field selector on
// its name): meshlet's RBAC can then name them (resourceNames).
type ConfigMapWatch struct {
	refs    []ObjectRef
	infs    []cache.SharedIndexInformer
	listers []listersv1.ConfigMapLister
	start   []func(<-chan struct{})
}

// WatchConfigMaps prepares the informers; changed(i) is called whenever
// refs[i] is added, changed or deleted (Get reads it). Start runs them.
func WatchConfigMaps(client kubernetes.Interface, refs []ObjectRef, changed func(i int)) *ConfigMapWatch {
	w := &ConfigMapWatch{refs: slices.Clone(refs)}
	for i, ref := range refs {
		f := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(ref.Namespace),
			informers.WithTweakListOptions(func(o *metav1.ListOptions) {
				o.FieldSelector = fields.OneTermEqualSelector("metadata.name", ref.Name).String()
			}))
		inf := f.Core().V1().ConfigMaps().Informer()
		_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(any) { changed(i) },
			UpdateFunc: func(any, any) { changed(i) },
			DeleteFunc: func(any) { changed(i) },
		})
		w.infs = append(w.infs, inf)
		w.listers = append(w.listers, f.Core().V1().ConfigMaps().Lister())
		w.start = append(w.start, f.Start)
	}
	return w
}

// Start runs the informers until ctx ends.
func (w *ConfigMapWatch) Start(ctx context.Context) {
	for _, s := range w.start {
		s(ctx.Done())
	}
}

// Synced reports whether every informer has listed once.
func (w *ConfigMapWatch) Synced() bool {
	for _, inf := range w.infs {
		if !inf.HasSynced() {
			return false
		}
	}
	return true
}

// WaitForSync waits for every informer's first list, or ctx.
func (w *ConfigMapWatch) WaitForSync(ctx context.Context) error {
	syncs := make([]cache.InformerSynced, len(w.infs))
	for i, inf := range w.infs {
		syncs[i] = inf.HasSynced
	}
	if !cache.WaitForCacheSync(ctx.Done(), syncs...) {
		return fmt.Errorf("ConfigMap informers not synced: %w", context.Cause(ctx))
	}
	return nil
}

// Get returns refs[i] as last seen; nil when it does not exist (or has not
// been listed yet: see Synced).
func (w *ConfigMapWatch) Get(i int) *ConfigMap {
	cm, err := w.listers[i].ConfigMaps(w.refs[i].Namespace).Get(w.refs[i].Name)
	if err != nil {
		return nil
	}
	return configMapOf(cm)
}

func configMapOf(cm *corev1.ConfigMap) *ConfigMap {
	out := &ConfigMap{UID: cm.UID, ResourceVersion: cm.ResourceVersion, Data: cm.Data}
	for k := range cm.Data {
		out.Keys = append(out.Keys, k)
	}
	for k := range cm.BinaryData {
		out.Keys = append(out.Keys, k)
	}
	slices.Sort(out.Keys)
	return out
}

// Len is how many ConfigMaps w watches.
func (w *ConfigMapWatch) Len() int { return len(w.refs) }

// ObjectRefList is a flag of object references: repeatable, each
// NAMESPACE/NAME (or a comma-separated list of them, as an environment
// variable gives them).
type ObjectRefList struct{ Dst *[]ObjectRef }

func (r ObjectRefList) String() string {
	if r.Dst == nil {
		return ""
	}
	parts := make([]string, len(*r.Dst))
	for i, ref := range *r.Dst {
		parts[i] = ref.String()
	}
	return strings.Join(parts, ",")
}

func (r ObjectRefList) Set(v string) error {
	for _, item := range strings.Split(v, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		ref, err := ParseObjectRef(item)
		if err != nil {
			return err
		}
		*r.Dst = append(*r.Dst, ref)
	}
	return nil
}

// ParseObjectRef reads NAMESPACE/NAME.
func ParseObjectRef(s string) (ObjectRef, error) {
	ns, name, ok := strings.Cut(s, "/")
	if !ok {
		return ObjectRef{}, fmt.Errorf("%q: want NAMESPACE/NAME", s)
	}
	if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
		return ObjectRef{}, fmt.Errorf("%q: namespace %s", s, strings.Join(errs, "; "))
	}
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return ObjectRef{}, fmt.Errorf("%q: name %s", s, strings.Join(errs, "; "))
	}
	return ObjectRef{Namespace: ns, Name: name}, nil
}
