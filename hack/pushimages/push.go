package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// Push uploads the one image of the docker-archive tarball to ref and returns
// the pushed reference by digest (repository@sha256:…). With insecure, ref's
// registry may be plain HTTP wherever it is; without, only a local one may
// (name.Registry.Scheme).
func Push(ctx context.Context, tarballPath, ref string, insecure bool) (name.Digest, error) {
	var opts []name.Option
	if insecure {
		opts = append(opts, name.Insecure)
	}
	r, err := name.ParseReference(ref, opts...)
	if err != nil {
		return name.Digest{}, fmt.Errorf("image reference %q: %w", ref, err)
	}
	img, err := tarball.ImageFromPath(tarballPath, nil)
	if errors.Is(err, fs.ErrNotExist) {
		return name.Digest{}, fmt.Errorf("%s: no such tarball (make build-images writes it)", tarballPath)
	}
	if err != nil {
		return name.Digest{}, fmt.Errorf("%s: %w", tarballPath, err)
	}
	digest, err := img.Digest()
	if err != nil {
		return name.Digest{}, fmt.Errorf("%s: %w", tarballPath, err)
	}
	if err := remote.Write(r, img, remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
		return name.Digest{}, fmt.Errorf("pushing %s to %s: %w", tarballPath, r, err)
	}
	return r.Context().Digest(digest.String()), nil
}
