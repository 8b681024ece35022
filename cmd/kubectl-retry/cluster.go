package main

import (
	"context"
	"flag"
	"slices"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/retrydev/retry-operator/api/v1alpha1"
	"github.com/retrydev/retry-operator/internal/webhook/podinject"
)

// The names of the manager's objects, as the API package spells them.
const (
	injectWebhook            = v1alpha1.InjectWebhookName
	validateWebhook          = v1alpha1.ValidateWebhookName
	crdName                  = "retrypolicies." + v1alpha1.GroupName
	defaultOperatorNamespace = v1alpha1.OperatorNamespace
)

// clusterFlags are the usual kubectl connection flags.
type clusterFlags struct {
	kubeconfig, context, namespace string
}

func (f *clusterFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.kubeconfig, "kubeconfig", "", "kubeconfig file (default: $KUBECONFIG, else ~/.kube/config)")
	fs.StringVar(&f.context, "context", "", "kubeconfig context")
	fs.StringVar(&f.namespace, "n", "", "namespace (default: the context's)")
	fs.StringVar(&f.namespace, "namespace", "", "same as -n")
}

// client connects as kubectl would and returns the namespace to use.
func (f *clusterFlags) client() (client.Client, string, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = f.kubeconfig
	overrides := &clientcmd.ConfigOverrides{CurrentContext: f.context}
	overrides.Context.Namespace = f.namespace
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides)
	cfg, err := cc.ClientConfig()
	if err != nil {
		return nil, "", err
	}
	ns, _, err := cc.Namespace()
	if err != nil {
		return nil, "", err
	}
	cfg.Timeout = 30 * time.Second
	c, err := client.New(cfg, client.Options{Scheme: clusterScheme()})
	return c, ns, err
}

func clusterScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	_ = v1alpha1.AddToScheme(s)
	return s
}

// excludedNamespaces are those the injector never touches: what the inject
// webhook's namespaceSelector excludes by name, else kube-system and the
// default operator namespace.
func excludedNamespaces(ctx context.Context, c client.Client) []string {
	var list admissionv1.MutatingWebhookConfigurationList
	if err := c.List(ctx, &list); err == nil {
		for _, cfg := range list.Items {
			for _, w := range cfg.Webhooks {
				if w.Name != injectWebhook || w.NamespaceSelector == nil {
					continue
				}
				for _, e := range w.NamespaceSelector.MatchExpressions {
					if e.Key == corev1.LabelMetadataName && e.Operator == metav1.LabelSelectorOpNotIn {
						return e.Values
					}
				}
			}
		}
	}
	return v1alpha1.ExcludedNamespaces(defaultOperatorNamespace)
}

func hasSidecar(p *corev1.Pod) bool {
	return slices.ContainsFunc(p.Spec.InitContainers, isSidecar) || slices.ContainsFunc(p.Spec.Containers, isSidecar)
}

func isSidecar(c corev1.Container) bool { return c.Name == podinject.ContainerName }
