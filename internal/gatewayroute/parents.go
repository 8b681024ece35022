package gatewayroute

import (
	"fmt"
	"strconv"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// NamespacedName names a Service.
type NamespacedName = types.NamespacedName

// ClusterDomain is the cluster's DNS domain, the suffix of a Service's full
// name (docs/gateway-api.md#hosts).
const ClusterDomain = "cluster.local"

// Parent is a parentRef of a route that names a Service (group "", kind
// Service): the route applies to calls to it.
type Parent struct {
	// Index is the parentRef's index in spec.parentRefs.
	Index   int
	Service NamespacedName
	// Port is parentRefs[].port; 0 for every port.
	Port int32
}

// IsService reports whether ref names a Service (GAMMA): group "" and kind
// Service, both given (Gateway API's defaults are a Gateway).
func IsService(ref gwv1.ParentReference) bool {
	return ref.Group != nil && *ref.Group == "" && ref.Kind != nil && *ref.Kind == "Service"
}

// ServiceParents returns the parentRefs of route that name a Service, and
// the indexes of the others (Gateways: not ours).
func ServiceParents(route *gwv1.HTTPRoute) (services []Parent, others []int) {
	return serviceParents(route.Namespace, route.Spec.ParentRefs)
}

// GRPCServiceParents is ServiceParents of a GRPCRoute.
func GRPCServiceParents(route *gwv1.GRPCRoute) (services []Parent, others []int) {
	return serviceParents(route.Namespace, route.Spec.ParentRefs)
}

// serviceParents are the Service parents among the parentRefs of a route in
// namespace routeNamespace.
func serviceParents(routeNamespace string, refs []gwv1.ParentReference) (services []Parent, others []int) {
	for i, ref := range refs {
		if !IsService(ref) {
			others = append(others, i)
			continue
		}
		ns := routeNamespace
		if ref.Namespace != nil && *ref.Namespace != "" {
			ns = string(*ref.Namespace)
		}
		services = append(services, Parent{Index: i, Service: NamespacedName{Namespace: ns, Name: string(ref.Name)},
			Port: ptr.Deref(ref.Port, 0)})
	}
	return services, others
}

// Hosts are the names callers in callerNamespace reach the Service by,
// shortest first: for callers in shop, payments; then payments.shop,
// payments.shop.svc and payments.shop.svc.cluster.local; each on the
// parent's port only when it names one.
func (p Parent) Hosts(callerNamespace string) []string {
	svc, ns := p.Service.Name, p.Service.Namespace
	var names []string
	if callerNamespace == ns {
		names = append(names, svc)
	}
	names = append(names, svc+"."+ns, fmt.Sprintf("%s.%s.svc", svc, ns), fmt.Sprintf("%s.%s.svc.%s", svc, ns, ClusterDomain))
	if p.Port != 0 {
		for i := range names {
			names[i] += ":" + strconv.Itoa(int(p.Port))
		}
	}
	return names
}

// applying are the parents whose routes apply to callers in callerNamespace,
// and whether the route is a consumer route for each: a route in another
// namespace than its Service's applies to the callers of its own namespace
// only (GAMMA's consumer route); a producer route to every caller.
func applying(routeNamespace, callerNamespace string, parents []Parent) (out []Parent, consumer []bool) {
	for _, p := range parents {
		c := p.Service.Namespace != routeNamespace
		if c && callerNamespace != routeNamespace {
			continue
		}
		out, consumer = append(out, p), append(consumer, c)
	}
	return out, consumer
}
