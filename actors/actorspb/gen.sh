#!/bin/sh
# Generates messages.pb.go with protoc (Debian's protobuf-compiler, 3.21.12)
# and protoc-gen-go at the version go.mod pins (its `tool` directive, built
# from the module cache): the generated code matches the runtime it runs
# against, on every machine. .ci/run regenerates and fails on any diff.
set -eu
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
go build -o "$bin/protoc-gen-go" google.golang.org/protobuf/cmd/protoc-gen-go
protoc --plugin=protoc-gen-go="$bin/protoc-gen-go" --go_out=. --go_opt=paths=source_relative messages.proto
