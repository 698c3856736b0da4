package actors_test

import (
	"testing"

	"github.com/asynkron/protoactor-go/remote"
	"google.golang.org/protobuf/proto"

	"github.com/cairn-agents/cairn/actors/actorspb"
)

// Every message that may cross members goes through protoactor-go's remote
// serializer (a plain Go struct would be dropped between members): each one
// serializes with the default (protobuf) serializer and comes back equal.
func TestMessagesCrossMembers(t *testing.T) {
	for _, msg := range []proto.Message{
		&actorspb.Wake{SessionId: "s1", RunId: "r1", Reason: actorspb.WakeReason_WAKE_REASON_RECOVERED},
		&actorspb.ChildFinished{SessionId: "s1", RunId: "r1", ChildSessionId: "s2", ChildRunId: "r2", CallId: "call_1", Status: "completed"},
		&actorspb.Stop{SessionId: "s1", RunId: "r1", Reason: "cancelled"},
		&actorspb.Ack{Ok: true, Error: ""},
	} {
		b, typeName, err := remote.Serialize(msg, remote.DefaultSerializerID)
		if err != nil {
			t.Fatalf("%T: %v", msg, err)
		}
		back, err := remote.Deserialize(b, typeName, remote.DefaultSerializerID)
		if err != nil {
			t.Fatalf("%T: %v", msg, err)
		}
		if !proto.Equal(msg, back.(proto.Message)) {
			t.Fatalf("%T: %v came back as %v", msg, msg, back)
		}
	}
	// A plain struct does not serialize: that is why local-only messages
	// (attempt outcomes, timer ticks) never leave their member.
	if _, _, err := remote.Serialize(struct{ X int }{1}, remote.DefaultSerializerID); err == nil {
		t.Fatal("a plain struct serialized with the protobuf serializer")
	}
}
