// Package raftlog is what a partition replica persists: the raft state file (state.go) and
// Storage (storage.go), the raft.Storage over the partition's segment log.
package raftlog
