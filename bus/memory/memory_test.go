package memory_test

import (
	"testing"

	"github.com/threadline/threadline/bus/bustest"
	"github.com/threadline/threadline/bus/memory"
	"github.com/threadline/threadline/instanceai"
)

func TestContract(t *testing.T) {
	bustest.Run(t, func(t *testing.T) (instanceai.Bus, instanceai.Bus) {
		n := memory.NewNetwork()
		return n.Bus(), n.Bus()
	}, func(t *testing.T, b instanceai.Bus) { b.(*memory.Bus).Disconnect() })
}
