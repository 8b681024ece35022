// Command pushimages pushes image tarballs (docker-archive, as hack/images
// writes them into bin/images) to any OCI registry, without Docker: `make
// push-images IMG=… SIDECAR_IMG=…` (docs/operations.md, "Images").
//
//	go run ./hack/pushimages bin/images/manager.tar=registry.example/retry/manager:v0.1.0 \
//	    bin/images/retry-sidecar.tar=registry.example/retry/retry-sidecar:v0.1.0
//
// Each tarball holds one image; it is pushed under the reference given,
// whatever name it was built with, and its digest printed. Credentials come
// from the Docker config (~/.docker/config.json, $DOCKER_CONFIG), as `docker
// login` or `crane auth login` write it. Registries on localhost, 127.0.0.0/8,
// ::1, *.local and private addresses are spoken to over plain HTTP when they
// do not answer HTTPS; -insecure allows that for every registry.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
)

func main() {
	insecure := flag.Bool("insecure", false, "allow plain HTTP (and any certificate) for every registry, not only local ones")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: %s [-insecure] TARBALL=REFERENCE...\n", filepath.Base(os.Args[0]))
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() == 0 {
		flag.Usage()
		os.Exit(2)
	}
	os.Exit(run(flag.Args(), *insecure))
}

// run pushes each TARBALL=REFERENCE argument in turn and returns the exit
// code: 2 for a malformed argument, 1 for a failed push.
func run(pairs []string, insecure bool) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	for _, arg := range pairs {
		tarball, ref, ok := strings.Cut(arg, "=")
		if !ok || tarball == "" || ref == "" {
			fmt.Fprintf(os.Stderr, "pushimages: %q: want TARBALL=REFERENCE\n", arg)
			return 2
		}
		digest, err := Push(ctx, tarball, ref, insecure)
		if err != nil {
			fmt.Fprintln(os.Stderr, "pushimages:", err)
			return 1
		}
		fmt.Printf("pushed %s (%s)\n", digest, tarball)
	}
	return 0
}
