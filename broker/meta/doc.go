// Package meta holds the broker's persistent metadata: its users (with argon2id password
// hashes, never plaintext) and its topics.
//
// The state lives in one file, <dir>/meta.json, rewritten whole on every change: the new
// content goes to a temporary file in the same directory (mode 0600), which is fsynced and
// renamed over meta.json, and then the directory is fsynced. A crash therefore leaves either
// the old or the new file; leftover temporary files are removed by Open.
//
// File format (format_version 2, never change it in place; bump the version instead):
//
//	{
//	  "format_version": 2,
//	  "checksum": "sha256:<hex of SHA-256 over the compact JSON of state>",
//	  "state": {
//	    "users":  [{"name": "alice", "hash": "$argon2id$v=19$...", "admin": true},
//	               {"name": "shop", "hash": "$argon2id$v=19$...",
//	                "grants": [{"topic": "orders", "roles": ["produce", "consume"]}]}, ...],
//	    "topics": [{"name": "orders", "kind": "durable", "partitions": 3, "user": "shop",
//	                "options": [{"key": "retention.bytes", "value": "1073741824"}],
//	                "created_at": "2025-01-01T00:00:00Z"}, ...]
//	  }
//	}
//
// "admin" is the broker-wide admin role; "grants" are a user's roles on topics ("produce",
// "consume"; a grant always has at least one). A topic's "user" (optional) is the user that
// CREATE_TOPIC named, kept for METADATA; it gives no rights by itself.
//
// Format version 1 had no grants: each topic's (required) "user" owned it with every right.
// Open reads it as that user holding both roles on the topic, keeps the old file as
// meta.json.v1 and rewrites meta.json as version 2; a version-1 broker refuses a version 2 file
// (format_version 2 is not one it reads) rather than misreading it.
//
// Users, their grants and topics are sorted by name, so equal states give equal files. The
// checksum is taken over the state's JSON with insignificant whitespace removed, so
// re-indenting the file is harmless but any change to its content is detected. A missing meta.json is an empty
// state; an unreadable, truncated, garbled or invalid one makes Open fail with an error that
// names the file (ErrCorrupt or ErrInvalid), never an empty state, which would drop every
// topic.
//
// Concurrency: a Store is safe for concurrent use. Updates are serialised; readers (State,
// User, Topic) never wait for an Update's disk writes. Update blocks on fsync (milliseconds),
// so call it from a worker, never from an event loop. Lock order: Store.writeMu, then
// Store.mu.
//
// Example:
//
//	st, err := meta.Open(filepath.Join(dataDir, "meta"))
//	if err != nil {
//		return err
//	}
//	hash, err := auth.Hash(password, auth.DefaultParams())
//	if err != nil {
//		return err
//	}
//	err = st.Update(func(s *meta.State) error {
//		if _, ok := s.Topics["orders"]; ok {
//			return errTopicExists
//		}
//		s.Users["alice"] = meta.User{Name: "alice", Hash: hash}
//		s.Topics["orders"] = meta.Topic{Name: "orders", Kind: wire.KindDurable,
//			Partitions: 3, User: "alice", CreatedAt: time.Now()}
//		s.Grant("alice", "orders", wire.RolesBoth)
//		return nil
//	})
package meta
