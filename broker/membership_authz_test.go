package broker

import (
	"testing"

	"github.com/lightq/lightq/wire"
)

// The authorization matrix's rows of the cluster membership requests (authz_test.go), on a
// broker without cluster settings: an admin is told it is no cluster member (or, for
// MEMBERSHIP, answered as a cluster of one), anyone else is refused first.
func init() { authzOps = append(authzOps, membershipAuthzOps...) }

var membershipAuthzOps = []authzOp{
	{"ADD_BROKER", wire.OpAddBroker, func(t *testing.T, e *authzEnv, c *rawClient, who string) wire.Code {
		m := wire.AddBroker{NodeID: 2, Addr: "127.0.0.1:1", ClusterAddr: "127.0.0.1:2"}
		code, _ := request(t, c, wire.OpAddBroker, m.AppendTo(nil))
		return code
	}},
	{"MOVE_REPLICAS", wire.OpMoveReplicas, func(t *testing.T, e *authzEnv, c *rawClient, who string) wire.Code {
		m := wire.MoveReplicas{Topic: "dq", Replicas: []uint32{2}}
		code, _ := request(t, c, wire.OpMoveReplicas, m.AppendTo(nil))
		return code
	}},
	{"DRAIN_BROKER", wire.OpDrainBroker, func(t *testing.T, e *authzEnv, c *rawClient, who string) wire.Code {
		code, _ := request(t, c, wire.OpDrainBroker, (&wire.BrokerID{NodeID: 1}).AppendTo(nil))
		return code
	}},
	{"REMOVE_BROKER", wire.OpRemoveBroker, func(t *testing.T, e *authzEnv, c *rawClient, who string) wire.Code {
		code, _ := request(t, c, wire.OpRemoveBroker, (&wire.BrokerID{NodeID: 1}).AppendTo(nil))
		return code
	}},
	{"MEMBERSHIP", wire.OpMembership, func(t *testing.T, e *authzEnv, c *rawClient, who string) wire.Code {
		code, body := request(t, c, wire.OpMembership, (&wire.Membership{}).AppendTo(nil))
		if code == 0 {
			var resp wire.MembershipResponse
			if err := resp.Decode(body); err != nil || len(resp.Brokers) != 1 || resp.NodeID != 1 || len(resp.Partitions) != 0 {
				t.Errorf("MEMBERSHIP of a broker without cluster settings: %+v, %v", resp, err)
			}
		}
		return code
	}},
}
