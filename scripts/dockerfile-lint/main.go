// Command dockerfile-lint runs BuildKit's own Dockerfile checks — what `docker build --check`
// runs — on a Dockerfile, without a Docker engine: BuildKit's parser, its instruction
// parser and every lint rule of its Dockerfile frontend, taken from the Go module pinned in
// go.mod. Base images are not pulled: their configuration is taken as empty (a Dockerfile
// that relies on a variable its base image defines is reported as using an undefined one).
//
//	dockerfile-lint Dockerfile [...]
//
// Prints each warning with its file, line and rule, and exits 1 if any file has a warning
// or does not parse, 0 if all are clean.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/moby/buildkit/client/llb"
	"github.com/moby/buildkit/client/llb/sourceresolver"
	"github.com/moby/buildkit/frontend/dockerfile/dockerfile2llb"
	"github.com/moby/buildkit/frontend/dockerui"
	digest "github.com/opencontainers/go-digest"
)

// offline answers every base image with an empty configuration, so linting never reaches
// a registry.
type offline struct{}

func (offline) ResolveImageConfig(_ context.Context, ref string, _ sourceresolver.Opt) (string, digest.Digest, []byte, error) {
	config := []byte(`{"architecture":"amd64","os":"linux","config":{}}`)
	return ref, digest.FromBytes(config), config, nil
}

func lint(path string) (int, error) {
	source, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	ctx := context.Background()
	// The source map names the file in warnings; it needs a definition, any will do.
	definition, err := llb.Scratch().Marshal(ctx)
	if err != nil {
		return 0, err
	}
	sourceMap := llb.NewSourceMap(nil, path, "Dockerfile", source)
	sourceMap.Definition = definition
	results, err := dockerfile2llb.DockerfileLint(ctx, source, dockerfile2llb.ConvertOpt{
		Config:       dockerui.Config{},
		MetaResolver: offline{},
		SourceMap:    sourceMap,
	})
	if err != nil {
		return 0, err
	}
	for _, warning := range results.Warnings {
		line := 0
		if warning.Location != nil && len(warning.Location.Ranges) > 0 {
			line = int(warning.Location.Ranges[0].Start.Line)
		}
		fmt.Printf("%s:%d: %s: %s (%s)\n", path, line, warning.RuleName, warning.Detail, warning.URL)
	}
	if results.Error != nil {
		return len(results.Warnings), fmt.Errorf("%s: %s", path, results.Error.Message)
	}
	return len(results.Warnings), nil
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: dockerfile-lint Dockerfile [...]")
		os.Exit(2)
	}
	failed := false
	for _, path := range os.Args[1:] {
		warnings, err := lint(path)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			failed = true
			continue
		}
		if warnings > 0 {
			failed = true
			continue
		}
		fmt.Printf("%s: clean (BuildKit's Dockerfile checks)\n", path)
	}
	if failed {
		os.Exit(1)
	}
}
