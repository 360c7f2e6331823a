// Package manifesttest checks the Kubernetes manifests of deploy/kubernetes:
// each decodes strictly against the Kubernetes API types (an unknown, a
// duplicate or a wrongly cased field fails, as the API server's strict
// field validation does), and what they say agrees with holdfast: the
// ConfigMap's configuration loads with holdfast's own config package from
// the files the pod mounts, the probes ask the admin listener's probe
// routes on its port, the container ports are its listeners', the
// arguments and user are the image's (internal/imagebuild), the grace
// period covers shutdown_grace, GOMEMLIMIT and the CPU limit are set as
// the comments say.
//
// It is a module of its own so that the Kubernetes API modules stay out of
// holdfast's module graph: `make test` runs its tests after the main
// module's. holdfast must not import it.
package manifesttest
