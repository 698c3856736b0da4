// Package actorspb holds the protobuf messages run actors exchange.
package actorspb

//go:generate protoc --go_out=. --go_opt=paths=source_relative messages.proto
