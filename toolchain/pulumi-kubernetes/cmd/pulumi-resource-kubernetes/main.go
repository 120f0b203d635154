// pulumi-resource-kubernetes: the Kubernetes provider of pulumi-kubernetes, served from its provider
// module.
//
// The module's own main embeds two generated files that are not in the module's zip (schema-embed.json,
// terraform-mapping-embed.json), so it does not build from the Go module proxy. This main makes the same
// call with the files they are generated from, which are in the zip: the toolchain copies schema.json
// and terraform-mapping.json next to this file before it builds (toolchain/pulumi-kubernetes/build.toml).
package main

import (
	_ "embed"

	"github.com/pulumi/pulumi-kubernetes/provider/v4/pkg/provider"
	"github.com/pulumi/pulumi-kubernetes/provider/v4/pkg/version"
)

//go:embed schema.json
var schema []byte

//go:embed terraform-mapping.json
var terraformMapping []byte

func main() {
	provider.Serve("kubernetes", version.Version, schema, terraformMapping)
}
