/*
Copyright 2026.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package v1alpha1

// GRPCStatusCode is the canonical name of a gRPC status code other than OK, as
// gRPC's status codes document spells it (CANCELLED with two Ls). Its number
// (GRPCStatusCode.Number) is the grpc-status value on the wire. The names are
// defined here only; docs/grpc.md says when each is worth retrying.
// +kubebuilder:validation:Enum=CANCELLED;UNKNOWN;INVALID_ARGUMENT;DEADLINE_EXCEEDED;NOT_FOUND;ALREADY_EXISTS;PERMISSION_DENIED;RESOURCE_EXHAUSTED;FAILED_PRECONDITION;ABORTED;OUT_OF_RANGE;UNIMPLEMENTED;INTERNAL;UNAVAILABLE;DATA_LOSS;UNAUTHENTICATED
type GRPCStatusCode string

// The gRPC status codes retryOn.grpcStatusCodes may list, in the order of
// their numbers, 1 to 16. OK (0) is never retried and has no name here.
const (
	GRPCCancelled          GRPCStatusCode = "CANCELLED"
	GRPCUnknown            GRPCStatusCode = "UNKNOWN"
	GRPCInvalidArgument    GRPCStatusCode = "INVALID_ARGUMENT"
	GRPCDeadlineExceeded   GRPCStatusCode = "DEADLINE_EXCEEDED"
	GRPCNotFound           GRPCStatusCode = "NOT_FOUND"
	GRPCAlreadyExists      GRPCStatusCode = "ALREADY_EXISTS"
	GRPCPermissionDenied   GRPCStatusCode = "PERMISSION_DENIED"
	GRPCResourceExhausted  GRPCStatusCode = "RESOURCE_EXHAUSTED"
	GRPCFailedPrecondition GRPCStatusCode = "FAILED_PRECONDITION"
	GRPCAborted            GRPCStatusCode = "ABORTED"
	GRPCOutOfRange         GRPCStatusCode = "OUT_OF_RANGE"
	GRPCUnimplemented      GRPCStatusCode = "UNIMPLEMENTED"
	GRPCInternal           GRPCStatusCode = "INTERNAL"
	GRPCUnavailable        GRPCStatusCode = "UNAVAILABLE"
	GRPCDataLoss           GRPCStatusCode = "DATA_LOSS"
	GRPCUnauthenticated    GRPCStatusCode = "UNAUTHENTICATED"
)

// grpcStatusCodes is indexed by number − 1.
var grpcStatusCodes = [...]GRPCStatusCode{
	GRPCCancelled, GRPCUnknown, GRPCInvalidArgument, GRPCDeadlineExceeded, GRPCNotFound,
	GRPCAlreadyExists, GRPCPermissionDenied, GRPCResourceExhausted, GRPCFailedPrecondition, GRPCAborted,
	GRPCOutOfRange, GRPCUnimplemented, GRPCInternal, GRPCUnavailable, GRPCDataLoss, GRPCUnauthenticated,
}

// GRPCStatusCodes lists the names retryOn.grpcStatusCodes may hold, by
// number: GRPCStatusCodes()[n-1] is the name of code n.
func GRPCStatusCodes() []GRPCStatusCode { return append([]GRPCStatusCode(nil), grpcStatusCodes[:]...) }

// Number is the code's grpc-status value (UNAVAILABLE → 14), and false for a
// name that is not one of GRPCStatusCodes (OK included).
func (c GRPCStatusCode) Number() (uint32, bool) {
	for i, name := range grpcStatusCodes {
		if name == c {
			return uint32(i + 1), true
		}
	}
	return 0, false
}

// GRPCStatusCodeOf is the name of grpc-status n, or "" for OK (0) and numbers
// gRPC does not define (above 16): for logs and metrics that name codes.
func GRPCStatusCodeOf(n uint32) GRPCStatusCode {
	if n == 0 || n > uint32(len(grpcStatusCodes)) {
		return ""
	}
	return grpcStatusCodes[n-1]
}
