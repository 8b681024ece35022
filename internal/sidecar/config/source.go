package config

import "github.com/retrydev/retry-operator/internal/policyset"

// Where the configuration in force came from, as /config and the logs say it.
const (
	// SourceAPI: retry-policies read through the API server watch.
	SourceAPI = "api"
	// SourceFile: policies.json of the mounted ConfigMap (--config-dir).
	SourceFile = "file"
	// SourcePolicyFile: RetryPolicy YAML files only (--policy-file).
	SourcePolicyFile = "policy-file"
)

// delivery is one source's view of the namespace's policies.json.
type delivery struct {
	source string
	// data is policies.json; nil when the ConfigMap (or the file) does not exist.
	data []byte
}

// revision is the delivery's revision; ok is false when it has no document or
// an unreadable one.
func (d *delivery) revision() (rev int64, ok bool) {
	if d == nil || d.data == nil {
		return 0, false
	}
	rev, err := policyset.PeekRevision(d.data)
	return rev, err == nil
}

// choose decides which delivery of policies.json to apply, given the mounted
// file's (nil without --config-dir), the API watch's (nil while the watch is
// not running) and the revision in force. ok is false when every delivery is
// older than the revision in force: the configuration in force stays. Rules,
// first match wins:
//
//  1. a readable delivery with a revision above the one in force: the highest
//     of them (the API's on a tie)
//  2. the authoritative source — the API while its watch runs, else the file —
//     when it has no document (the ConfigMap is gone: no policies), an
//     unreadable one (refused later, and reported), or the revision in force
//     (the same document: pod labels may have changed)
//  3. nothing: the authoritative source is older than the revision in force
//
// Examples, revision in force 7:
//
//	file 7, API 8          -> API 8        (rule 1: an edit arrives through the watch first)
//	file 9, API 8          -> file 9       (rule 1: a stuck watch cannot hold the pod back)
//	file 7, API absent     -> API absent   (rule 2: the last policy was deleted)
//	file 6, API not running -> keep 7      (rule 3: the kubelet's copy lags behind)
//	file absent, API not running -> file absent (rule 2)
func choose(file, api *delivery, inForce int64) (delivery, bool) {
	var best *delivery
	var bestRev int64
	for _, d := range []*delivery{api, file} {
		if rev, ok := d.revision(); ok && rev > inForce && (best == nil || rev > bestRev) {
			best, bestRev = d, rev
		}
	}
	if best != nil {
		return *best, true
	}
	auth := api
	if auth == nil {
		auth = file
	}
	if auth == nil {
		return delivery{}, false
	}
	if rev, ok := auth.revision(); ok && rev < inForce {
		return delivery{}, false
	}
	return *auth, true
}
