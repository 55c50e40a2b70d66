package auth_test

import (
	"fmt"
	"time"

	"github.com/lightq/lightq/broker/auth"
	"github.com/lightq/lightq/broker/workpool"
)

func Example() {
	hash, _ := auth.Hash("s3cret", auth.TestParams()) // DefaultParams() in production
	verifier := auth.NewVerifier(10000, 10*time.Minute)
	throttle := auth.NewThrottle(auth.DefaultThrottleConfig())
	pool := workpool.New(4, 256)
	defer pool.Close()

	ip := "192.0.2.10"
	attempt, refusal := throttle.Admit(ip, "alice", time.Now()) // on the event loop
	if refusal != auth.Admitted {
		return // answer RESOURCE_LIMIT if refusal.Busy(), else TOO_MANY_ATTEMPTS
	}
	result := make(chan string, 1)
	ok := pool.Submit(func() {
		// On the worker, immediately before hashing: decide again.
		if refusal := throttle.Evaluate(attempt, time.Now()); refusal != auth.Admitted {
			throttle.Finish(attempt, auth.Unverified, time.Now())
			result <- refusal.Message()
			return
		}
		if verifier.Check("alice", hash, "s3cret") {
			throttle.Finish(attempt, auth.Succeeded, time.Now())
			result <- "authenticated"
			return
		}
		delay, _ := throttle.Finish(attempt, auth.Failed, time.Now())
		result <- fmt.Sprint("answer AUTH_FAILED after ", delay)
	})
	if !ok {
		throttle.Finish(attempt, auth.Unverified, time.Now())
		return // answer RESOURCE_LIMIT
	}
	fmt.Println(<-result)
	// Output: authenticated
}
