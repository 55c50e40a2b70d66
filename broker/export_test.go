package broker

// Test-only access for the external tests of this directory (package broker_test).

// TransferCoordinator asks this broker's replica of group's offsets partition to hand its
// leadership to node to, and reports whether the replica already names to as its leader.
// The transfer is a request: call it again until it reports true.
func (s *Server) TransferCoordinator(group string, to uint64) bool {
	if s.cluster == nil {
		return false
	}
	op, leader := s.cluster.coordinatorOf(group)
	if op == nil || op.store == nil {
		return false
	}
	if leader == to {
		return true
	}
	op.store.Replica().TransferLeadership(to)
	return false
}
