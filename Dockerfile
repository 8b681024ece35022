# For users with Docker. One static binary per image, run as 65532:65532 with the
# entrypoint /<binary> — the same user and entrypoint hack/images writes when there
# is no Docker (make build-images). Pick the image with --target:
#
#   docker build --target manager       -t retry.dev/manager:dev .
#   docker build --target retry-sidecar -t retry.dev/retry-sidecar:dev .
ARG BASE_IMAGE=golang:1.26
FROM ${BASE_IMAGE} AS builder
ARG TARGETOS
ARG TARGETARCH
WORKDIR /workspace
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN for b in manager retry-sidecar; do \
      CGO_ENABLED=0 GOOS=${TARGETOS:-linux} GOARCH=${TARGETARCH} \
      go build -trimpath -ldflags "-s -w" -o /out/$b ./cmd/$b || exit 1; \
    done

FROM gcr.io/distroless/static:nonroot AS retry-sidecar
COPY --from=builder /out/retry-sidecar /retry-sidecar
USER 65532:65532
ENTRYPOINT ["/retry-sidecar"]

# The last stage is the default target.
FROM gcr.io/distroless/static:nonroot AS manager
COPY --from=builder /out/manager /manager
USER 65532:65532
ENTRYPOINT ["/manager"]
