package lqcat

import (
	"flag"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
)

// onceFlag is a flag that may be repeated only with the same value: "-t a -t b" is an error
// instead of silently taking b (kcat users repeat flags when they edit a command). Flags that
// share a variable (--partitions and -n) share the check too: each sees the value, not who set it.
type onceFlag[T comparable] struct {
	p     *T
	set   *bool
	parse func(string) (T, error)
}

// onceVar registers a string onceFlag on fs that writes into p, with p's value as default.
func onceVar(fs *flag.FlagSet, p *string, name, usage string) {
	fs.Var(onceFlag[string]{p: p, set: new(bool), parse: func(s string) (string, error) { return s, nil }}, name, usage)
}

// onceIntVar is onceVar for an integer flag; flags naming the same p share one check.
func onceIntVar[T int | int64](fs *flag.FlagSet, p *T, set *bool, name, usage string) {
	fs.Var(onceFlag[T]{p: p, set: set, parse: func(s string) (T, error) {
		n, err := strconv.ParseInt(s, 0, 64)
		if err != nil || int64(T(n)) != n {
			return 0, fmt.Errorf("%q is not an integer", s)
		}
		return T(n), nil
	}}, name, usage)
}

func (o onceFlag[T]) String() string {
	if o.p == nil {
		return ""
	}
	return fmt.Sprint(*o.p)
}

func (o onceFlag[T]) Set(s string) error {
	v, err := o.parse(s)
	if err != nil {
		return err
	}
	if *o.set && *o.p != v {
		return fmt.Errorf("given twice with different values (%v, then %v): give it once", *o.p, v)
	}
	*o.p, *o.set = v, true
	return nil
}

// clientOption is one kcat -X key lqcat understands: the setting it maps to, applied by set.
type clientOption struct {
	help string
	set  func(c *common, v string) error
}

// clientOptions are kcat's (librdkafka's) -X client properties that have a LightQ meaning.
// Each sets the same thing as its flag; a flag given as well must agree (see setOnce).
// The TLS properties (security.protocol, ssl.*) are added from tls.go.
var clientOptions = map[string]clientOption{
	"bootstrap.servers":    {"broker host:port, or a comma-separated list (-b)", func(c *common, v string) error { return setOnce(&c.broker, v, "-b") }},
	"metadata.broker.list": {"broker host:port, or a comma-separated list (-b)", func(c *common, v string) error { return setOnce(&c.broker, v, "-b") }},
	"sasl.username":        {"topic user (--user)", func(c *common, v string) error { return setOnce(&c.user, v, "--user") }},
	"sasl.password":        {"topic user's password (--password)", func(c *common, v string) error { return setOnce(&c.password, v, "--password") }},
	"client.id":            {"client name the broker logs", func(c *common, v string) error { return setOnce(&c.clientName, v, "client.id") }},
	"socket.connection.setup.timeout.ms": {"connect timeout in ms (--timeout)", func(c *common, v string) error {
		return setMillis(&c.timeout, v)
	}},
	"session.timeout.ms": {"consumer group member's session timeout in ms (-C -G)", func(c *common, v string) error {
		return setMillis(&c.sessionTimeout, v)
	}},
	"delivery.timeout.ms": {"-P: how long a message may wait for its acknowledgement, across reconnects", func(c *common, v string) error {
		return setMillis(&c.deliveryTimeout, v)
	}},
	"message.timeout.ms": {"-P: delivery.timeout.ms (librdkafka's older name)", func(c *common, v string) error {
		return setMillis(&c.deliveryTimeout, v)
	}},
}

// setMillis parses a positive number of milliseconds into *d.
func setMillis(d *time.Duration, v string) error {
	ms, err := strconv.ParseInt(v, 10, 64)
	if err != nil || ms <= 0 || ms > int64(365*24*time.Hour/time.Millisecond) {
		return fmt.Errorf("want a positive number of milliseconds, got %q", v)
	}
	*d = time.Duration(ms) * time.Millisecond
	return nil
}

// setOnce sets *p to v unless a flag (named flagName) set it to something else.
func setOnce(p *string, v, flagName string) error {
	if *p != "" && *p != v {
		return fmt.Errorf("%q conflicts with %s %q", v, flagName, *p)
	}
	*p = v
	return nil
}

// clientOptionKeys lists the keys for error messages.
func clientOptionKeys() string {
	keys := make([]string, 0, len(clientOptions))
	for k := range clientOptions {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return strings.Join(keys, ", ")
}

// applyClientOptions applies the -X options of c that are client options and returns the
// others, which only topic create takes (as topic options).
func (c *common) applyClientOptions() ([]string, error) {
	var rest []string
	for _, kv := range c.x {
		k, v, ok := splitHeader(kv)
		if !ok {
			return nil, usageErr("-X %q: want key=value", kv)
		}
		opt, known := clientOptions[k]
		if !known {
			rest = append(rest, kv)
			continue
		}
		if err := opt.set(c, v); err != nil {
			return nil, usageErr("-X %s: %v", k, err)
		}
	}
	return rest, nil
}

// noTopicOptions is the error for -X keys that are neither client options nor, outside topic
// create, anything else.
func noTopicOptions(rest []string) error {
	if len(rest) == 0 {
		return nil
	}
	k, _, _ := strings.Cut(rest[0], "=")
	return usageErr("-X %s: unknown client option (lqcat knows %s; topic options go to topic create)", k, clientOptionKeys())
}
