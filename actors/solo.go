package actors

import (
	"errors"
	"fmt"

	"github.com/asynkron/protoactor-go/cluster"
)

// soloProvider is the membership of a node alone: the topology {self},
// published once at start and never again. protoactor-go's in-memory test
// provider also publishes the member's departure at shutdown, and that
// write of cluster.MemberList races with the disthash placement actor,
// which reads the list without its lock while activations stop; a node
// alone has no one to tell it left.
type soloProvider struct{}

func (soloProvider) StartMember(c *cluster.Cluster) error {
	host, port, err := c.ActorSystem.GetHostPort()
	if err != nil {
		return fmt.Errorf("actors: solo member address: %w", err)
	}
	c.MemberList.UpdateClusterTopology(cluster.Members{{
		Id: c.ActorSystem.ID, Host: host, Port: int32(port), Kinds: c.GetClusterKinds(),
	}})
	return nil
}

// StartClient: a node alone is a member, never a client.
func (soloProvider) StartClient(*cluster.Cluster) error {
	return errors.New("actors: a node alone cannot start as a cluster client")
}

func (soloProvider) Shutdown(bool) error { return nil }
