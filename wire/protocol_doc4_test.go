package wire_test

import "github.com/lightq/lightq/wire"

// coordinatorExamples are PROTOCOL.md's examples of consumer groups in a cluster
// (section 16): FIND_COORDINATOR and NOT_COORDINATOR.
func coordinatorExamples() []protocolExample {
	var ex []protocolExample
	add := func(name string, doc *annotated, frame []byte) {
		ex = append(ex, protocolExample{name: name, doc: doc, frame: frame})
	}
	body := func(fill func(a *annotated)) *annotated {
		var a annotated
		fill(&a)
		return &a
	}
	const resp = wire.FlagResponse
	const notCoordinator = "group \"billing\": this broker (node 1) is not its coordinator; node 3 is, at 127.0.0.3:7400"
	add("error-not-coordinator",
		frame(wire.OpError, 0, 50, body(func(a *annotated) {
			a.u16(46, "code 46 NOT_COORDINATOR")
			a.str(notCoordinator, "message")
		})),
		wireFrame(wire.OpError, 0, 50, &wire.ErrorBody{Code: wire.CodeNotCoordinator, Message: notCoordinator}))
	add("find-coordinator-request",
		frame(wire.OpFindCoordinator, 0, 51, body(func(a *annotated) { a.str("billing", "group") })),
		wireFrame(wire.OpFindCoordinator, 0, 51, &wire.FindCoordinator{Group: "billing"}))
	add("find-coordinator-response",
		frame(wire.OpFindCoordinator, resp, 51, body(func(a *annotated) {
			a.u32(1, "node id of the answering broker: 1")
			a.u32(3, "coordinator: node 3")
			a.str(clusterAddr(3), "coordinator address")
			a.str("", "coordinator TLS address (no TLS listener)")
		})),
		wireFrame(wire.OpFindCoordinator, resp, 51, &wire.FindCoordinatorResponse{Node: 1, Coordinator: 3, Addr: clusterAddr(3)}))
	return ex
}
