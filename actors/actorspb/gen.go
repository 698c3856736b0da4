// Package actorspb holds the protobuf messages run actors exchange.
package actorspb

//go:generate sh gen.sh
