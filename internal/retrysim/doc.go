// Package retrysim runs pkg/retrypolicy on a virtual clock (package
// clocktest): Simulate plays one logical request against scripted upstream
// responses through the sidecar's own proxy and Transport, and Rehearse runs
// many logical requests against a simulated quota-limited upstream. Nothing
// really waits: minutes of virtual time take milliseconds. See
// docs/kubectl-retry.md.
package retrysim
