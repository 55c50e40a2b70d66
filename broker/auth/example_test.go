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

	result := make(chan bool, 1)
	ip := "192.0.2.10"
	if throttle.Blocked(ip, time.Now()) {
		return
	}
	if !pool.Submit(func() { result <- verifier.Check("alice", hash, "s3cret") }) {
		return // answer RESOURCE_LIMIT
	}
	if <-result {
		throttle.Success(ip)
		fmt.Println("authenticated")
	} else {
		fmt.Println("retry after", throttle.Failure(ip, time.Now()))
	}
	// Output: authenticated
}
