package nodesettings

import (
	"fmt"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// EnablementSelector is one of Istio's ambient enablement selectors
// (istio-cni's ambient.enablementSelectors, Istio 1.27): a pod matches
// when its labels match PodSelector and its namespace's labels match
// NamespaceSelector. An empty selector matches everything.
type EnablementSelector struct {
	PodSelector       metav1.LabelSelector `json:"podSelector"`
	NamespaceSelector metav1.LabelSelector `json:"namespaceSelector"`
}

// DeepCopy returns a copy of s that shares nothing with it.
func (s EnablementSelector) DeepCopy() EnablementSelector {
	return EnablementSelector{PodSelector: *s.PodSelector.DeepCopy(), NamespaceSelector: *s.NamespaceSelector.DeepCopy()}
}

// Equal reports whether s and o select the same pods, written the same.
func (s EnablementSelector) Equal(o EnablementSelector) bool {
	return apiequality.Semantic.DeepEqual(s, o)
}

func (s EnablementSelector) String() string {
	return fmt.Sprintf("pods %s in namespaces %s", selectorString(&s.PodSelector), selectorString(&s.NamespaceSelector))
}

func selectorString(s *metav1.LabelSelector) string {
	sel, err := metav1.LabelSelectorAsSelector(s)
	if err != nil {
		return "(invalid)"
	}
	if sel.Empty() {
		return "(all)"
	}
	return "{" + sel.String() + "}"
}

func (s EnablementSelector) validate(p *field.Path) field.ErrorList {
	opts := metav1validation.LabelSelectorValidationOptions{}
	errs := metav1validation.ValidateLabelSelector(&s.PodSelector, opts, p.Child("podSelector"))
	return append(errs, metav1validation.ValidateLabelSelector(&s.NamespaceSelector, opts, p.Child("namespaceSelector"))...)
}

// Selector is an EnablementSelector ready to match.
type Selector struct {
	pods, namespaces labels.Selector
}

// Compile turns selectors into Selectors, nil into nil; an error names
// the one that cannot (documents are validated before they get here).
func Compile(sel []EnablementSelector) ([]Selector, error) {
	if sel == nil {
		return nil, nil
	}
	out := make([]Selector, 0, len(sel))
	for i := range sel {
		pods, err := metav1.LabelSelectorAsSelector(&sel[i].PodSelector)
		if err != nil {
			return nil, fmt.Errorf("enablementSelectors[%d].podSelector: %w", i, err)
		}
		namespaces, err := metav1.LabelSelectorAsSelector(&sel[i].NamespaceSelector)
		if err != nil {
			return nil, fmt.Errorf("enablementSelectors[%d].namespaceSelector: %w", i, err)
		}
		out = append(out, Selector{pods: pods, namespaces: namespaces})
	}
	return out, nil
}

// Matches reports whether a pod with podLabels, in a namespace with
// namespaceLabels, matches s.
func (s Selector) Matches(podLabels, namespaceLabels map[string]string) bool {
	return s.pods.Matches(labels.Set(podLabels)) && s.namespaces.Matches(labels.Set(namespaceLabels))
}
