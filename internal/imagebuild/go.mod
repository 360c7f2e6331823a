module github.com/holdfast-db/holdfast/internal/imagebuild

go 1.26.8

replace github.com/holdfast-db/holdfast => ../..

require (
	github.com/go-sql-driver/mysql v1.10.1
	github.com/google/go-containerregistry v0.22.1
	github.com/holdfast-db/holdfast v0.0.0
)

require (
	filippo.io/edwards25519 v1.2.0 // indirect
	github.com/klauspost/compress v1.20.1 // indirect
	github.com/opencontainers/go-digest v1.0.0 // indirect
	github.com/opencontainers/image-spec v1.1.1 // indirect
	golang.org/x/sync v0.22.0 // indirect
	gopkg.in/yaml.v3 v3.0.1 // indirect
)
