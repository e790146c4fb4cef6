// Package deploy tests the deployment files next to it: the Kubernetes
// manifests (decoded strictly into the API types, built with kustomize,
// cross-checked against each other and against the rowlift binary) and the
// Dockerfile. It has no code of its own.
package deploy

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// objects are the decoded objects of one file or one kustomize build, by kind.
type objects struct {
	deployments     []*appsv1.Deployment
	services        []*corev1.Service
	configMaps      []*corev1.ConfigMap
	secrets         []*corev1.Secret
	serviceAccounts []*corev1.ServiceAccount
	namespaces      []*corev1.Namespace
	policies        []*networkingv1.NetworkPolicy
	budgets         []*policyv1.PodDisruptionBudget
}

// strict decodes YAML into the API types of the kinds rowlift's manifests use,
// refusing unknown fields, duplicate fields and fields spelled in another case,
// as the API server's strict field validation does.
var strict = func() runtime.Decoder {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{appsv1.AddToScheme, corev1.AddToScheme, networkingv1.AddToScheme, policyv1.AddToScheme} {
		if err := add(scheme); err != nil {
			panic(err)
		}
	}
	return serializer.NewCodecFactory(scheme, serializer.EnableStrict).UniversalDeserializer()
}()

// decode decodes every document of a multi-document YAML stream. Partial
// objects (a kustomize patch) decode too: only what is there is checked.
func decode(data []byte) (*objects, error) {
	o := &objects{}
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for i := 1; ; i++ {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return o, nil
		}
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		if isBlank(doc) {
			continue
		}
		obj, gvk, err := strict.Decode(doc, nil, nil)
		if err != nil {
			name := ""
			if gvk != nil {
				name = gvk.Kind + " "
			}
			return nil, fmt.Errorf("document %d: %s%w", i, name, err)
		}
		switch obj := obj.(type) {
		case *appsv1.Deployment:
			o.deployments = append(o.deployments, obj)
		case *corev1.Service:
			o.services = append(o.services, obj)
		case *corev1.ConfigMap:
			o.configMaps = append(o.configMaps, obj)
		case *corev1.Secret:
			o.secrets = append(o.secrets, obj)
		case *corev1.ServiceAccount:
			o.serviceAccounts = append(o.serviceAccounts, obj)
		case *corev1.Namespace:
			o.namespaces = append(o.namespaces, obj)
		case *networkingv1.NetworkPolicy:
			o.policies = append(o.policies, obj)
		case *policyv1.PodDisruptionBudget:
			o.budgets = append(o.budgets, obj)
		default:
			return nil, fmt.Errorf("document %d: %s is not a kind these checks know; add it to decode and check it", i, gvk)
		}
	}
}

// isBlank is a document of comments and blank lines only.
func isBlank(doc []byte) bool {
	for line := range bytes.Lines(doc) {
		line = bytes.TrimSpace(line)
		if len(line) > 0 && line[0] != '#' {
			return false
		}
	}
	return true
}
