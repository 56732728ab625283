package memory_test

import (
	"context"
	"fmt"

	"github.com/threadline/threadline/bus/memory"
)

// Two members of one network stand for two instances: what one publishes
// every listener hears, its own included, once its connection is up; a
// listen ends without an error when its context does.
func ExampleNetwork() {
	network := memory.NewNetwork()
	a, b := network.Bus(), network.Bus()
	defer a.Close()
	defer b.Close()

	ctx, stop := context.WithCancel(context.Background())
	up := make(chan struct{})
	heard := make(chan string)
	done := make(chan error)
	go func() {
		done <- b.Listen(ctx, func(payload []byte) { heard <- string(payload) },
			func(isUp bool, err error) {
				if isUp {
					close(up)
				}
			})
	}()
	<-up
	if err := a.Publish(ctx, []byte(`{"thread":"t1","seq":7}`)); err != nil {
		panic(err)
	}
	fmt.Println("b heard", <-heard)
	stop()
	fmt.Println("listen returned", <-done)
	// Output:
	// b heard {"thread":"t1","seq":7}
	// listen returned <nil>
}
