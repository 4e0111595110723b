module github.com/sidelock/sidelock/test/container

go 1.26.8

require (
	github.com/google/go-containerregistry v0.22.1
	github.com/opencontainers/runtime-spec v1.2.1
	github.com/sidelock/sidelock v0.0.0
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/klauspost/compress v1.19.2 // indirect
	github.com/opencontainers/go-digest v1.0.0 // indirect
	github.com/opencontainers/image-spec v1.1.1 // indirect
	github.com/redis/go-redis/v9 v9.23.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/sync v0.22.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
)

replace github.com/sidelock/sidelock => ../..
