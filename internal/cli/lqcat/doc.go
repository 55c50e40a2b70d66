// Package lqcat is lqcat, netcat for LightQ: one command that produces (-P), consumes (-C),
// lists metadata (-L) and administers topics, users and their roles, counters, consumer
// groups, and shows a cluster's replicated partitions. cmd/lqcat is a thin main around Main, which takes its arguments, environment,
// stdin, stdout and stderr as parameters so that tests drive it in-process against a real
// broker.
//
// # Conventions
//
// The flags are kcat's: where kcat has a flag for a thing, lqcat uses the same letter and
// meaning (-b -t -p -D -K -k -H -z -o -c -e -G -f -J -u -q -v). Deliberate differences:
//
//   - The mode must be given (-P, -C or -L): guessing it from terminals goes wrong in scripts.
//   - As the issue asked, FILE arguments of -P are read line by line like stdin, and -l sends
//     each FILE whole as one message; kcat does the reverse.
//   - -b HOST without a port means HOST:7450, the broker's default port; -V prints the version.
//   - -X takes kcat's (librdkafka's) client properties that have a LightQ meaning (see
//     clientOptions in xopts.go), in every mode and subcommand; topic create also takes topic
//     options there. An unknown key is an error, not ignored.
//   - A flag given twice with different values (-t a -t b) is an error; kcat takes the last.
//   - -G takes one group and -t one topic; kcat's "-G GROUP TOPIC" is -C -G GROUP -t TOPIC.
//     On a durable topic lqcat is a member of the group, like kcat's balanced consumer
//     (balanced.go): the broker assigns it partitions; it starts each at the group's
//     committed offset (-o where there is none) and commits, for each partition it holds,
//     the offset after the last message printed (every second, after flushing when the
//     broker takes the partition away, and at exit, SIGINT included, before leaving the
//     group), never one that was fetched but not printed. -e ends a member once the
//     partitions it holds are read to the end as it was when it got them. With -p, -G only
//     stores offsets for the partition lqcat reads (refused while the group has members).
//     On a transient topic -G names a queue group.
//   - -o accepts beginning, end, stored (with -G: what -G does anyway), N, -N (N before the end, per partition), s@MS and e@MS; e@
//     may be combined with a start (-o s@A -o e@B). e@MS stops a partition before its first
//     message at or after MS; when MS is in the past the end of the log stops it too.
//   - -e stops each partition at the end of the log as it was when lqcat started, so that
//     it terminates under a steady stream of new messages.
//   - -z takes none, s2 or zstd (LightQ's codecs); snappy is accepted as s2.
//   - -p -1 is the default partitioner: the key's hash, else round robin.
//
// Transient topics are pushed live: -C on one starts now, only -o end applies, and -o with
// another value, e@ and -e give exit code 7.
//
// # Credentials
//
// --user/--password or $LIGHTQ_USER/$LIGHTQ_PASSWORD name a user with roles on topics;
// --admin-user/--admin-password or $LIGHTQ_ADMIN_USER (default admin)/$LIGHTQ_ADMIN_PASSWORD
// an admin. Topic create and delete, user and acl connect as the admin (--user/--password of
// topic create name a user for the new topic; --password of user create and passwd is the new
// password, which is otherwise asked on the terminal or read from stdin, never taken from
// $LIGHTQ_PASSWORD); everything else connects as the user when its password is given, else as
// the admin. Credentials on the command line win over the environment: given the admin's and
// no user's, $LIGHTQ_USER/$LIGHTQ_PASSWORD are ignored. No password is ever printed: errors
// name the user, and any error text is scrubbed of the passwords in use before it is printed.
//
// # JSON
//
// -C -J prints one object per message, -P -J reads the same objects:
//
//	{"topic":"t","partition":0,"offset":7,"timestamp":1700000000000,"key":"k","value":"v",
//	 "headers":[{"name":"h","value":"x"}]}
//
// Keys, values and header names and values that are valid UTF-8 are JSON strings (which
// encoding/json keeps exact); other bytes are standard base64 with "key_encoding",
// "value_encoding" or, in a header, "name_encoding"/"value_encoding" set to "base64". A
// message without a key has "key":null (the protocol does not tell an empty key from none).
// -P -J ignores topic (it is -t) and offset (the broker assigns them), keeps partition
// unless -p is given, and keeps timestamp; so -C -J | -P -J reproduces keys, values,
// headers, partitions and timestamps exactly.
//
// # Consumer groups
//
// A group is a name on one durable topic: its live members and a committed offset per
// partition. "group list" (LIST_GROUPS) lists the groups with members or commits, "group
// describe" (DESCRIBE_GROUP) a group's members, their partitions, the committed offsets and
// the lag, and "group reset" commits new offsets, refused while the group has members.
//
// # Clusters
//
// "cluster status" shows the replicated partitions with their leaders and each replica's
// lag. A broker answers CLUSTER_STATUS from its own replicas and asks nobody, and only a
// partition's leader knows the other replicas' progress: so lqcat asks the broker of -b for
// the cluster's brokers (METADATA with the cluster flag), then every broker at once, and
// shows each partition as its leader answered (client.MergeClusterStatus). A broker it
// cannot ask is listed, and the partitions it leads show a follower's view; the exit code
// is then 1. It is a subcommand of its own, beside -L, so that -L's output stays as it is.
//
// # Exit codes
//
// 0 ok; 1 failure, or some messages not acknowledged (-P) or batches skipped because they
// cannot be decoded (-C, which says so on stderr and goes on); 2 usage; 3 cannot connect or the
// connection was lost; 4 authentication failed or not authorized; 5 unknown topic or
// partition (or user); 6 message too large; 7 not supported (topic kind, or a missing broker
// feature); 8 the topic (or user) exists; 9 offset out of range. -P exits with the code of the
// first failure when messages were not acknowledged (1 when it has no code of its own). A
// user naming a topic it holds no role on, existing or not, gets 4: the broker does not tell
// them apart.
//
// # Concurrency
//
// Main may run concurrently with itself; a run shares nothing with another. Within a run,
// -C runs one client.Consumer, whose handler writes through one mutex-guarded buffered
// stdout, flushed every 100ms (every message with -u) and before a group's commits.
//
// # Files
//
// cli.go (Main, usage, common flags, argument parsing, connecting), mode.go (-P/-C/-L flag
// checks), produce.go (streaming input splitter, producer, failure report), consume.go
// (-o, durable and transient consumption, commits), balanced.go (-G: the group member),
// format.go (escapes, -f, JSON),
// meta.go (-L), topic.go (topic create/delete/list, the create flags as topic options),
// stats.go (stats), group.go (group describe/reset/list), users.go (user and acl),
// cluster.go (cluster status),
// password.go (a new password from the terminal or stdin), errors.go (exit codes), xopts.go
// (-X client options, flags that may be given once).
package lqcat
