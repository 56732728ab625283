package storagetest

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/threadline/threadline/instanceai"
)

// testInstances: a store several processes share records the serving
// instances: registering lists the others whose lease holds, oldest
// first; a lease that ran out, and a removed record, are not listed;
// registering again replaces the record. The memory store serves one
// process and keeps none.
func testInstances(t *testing.T, s instanceai.Store) {
	reg, ok := s.(instanceai.InstanceRegistry)
	if !ok {
		t.Skip("the store does not implement instanceai.InstanceRegistry (one process only)")
	}
	ctx := context.Background()
	ids := func(list []instanceai.Instance) []string {
		var out []string
		for _, i := range list {
			out = append(out, i.ID)
		}
		return out
	}
	a := instanceai.Instance{ID: "a", Bus: "bus-1", Host: "h1", PID: 11}
	if others, err := reg.RegisterInstance(ctx, a, time.Minute); err != nil || len(others) != 0 {
		t.Fatalf("first instance: others %v, %v", ids(others), err)
	}
	time.Sleep(5 * time.Millisecond) // a later start
	b := instanceai.Instance{ID: "b", Bus: "bus-2", Host: "h2", PID: 22}
	others, err := reg.RegisterInstance(ctx, b, time.Minute)
	if err != nil || !slices.Equal(ids(others), []string{"a"}) {
		t.Fatalf("second instance: others %v, %v", ids(others), err)
	}
	if o := others[0]; o.Bus != "bus-1" || o.Host != "h1" || o.PID != 11 || o.StartedAt.IsZero() || !o.LeaseExpires.After(time.Now()) {
		t.Fatalf("the first instance's record: %+v", o)
	}
	// A short lease runs out; renewing brings it back.
	if _, err := reg.RegisterInstance(ctx, instanceai.Instance{ID: "c", Bus: "bus-1", Host: "h3", PID: 33}, time.Millisecond); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	others, err = reg.RegisterInstance(ctx, b, time.Minute)
	if err != nil || !slices.Equal(ids(others), []string{"a"}) {
		t.Fatalf("with c's lease run out: others %v, %v", ids(others), err)
	}
	if live, err := reg.LiveInstances(ctx); err != nil || !slices.Equal(ids(live), []string{"a", "b"}) {
		t.Fatalf("LiveInstances with c's lease run out = %v, %v; want a, b", ids(live), err)
	}
	if err := reg.RenewInstance(ctx, "c", time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := reg.RemoveInstance(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	others, err = reg.RegisterInstance(ctx, b, time.Minute)
	if err != nil || !slices.Equal(ids(others), []string{"c"}) {
		t.Fatalf("a removed, c renewed: others %v, %v", ids(others), err)
	}
	if live, err := reg.LiveInstances(ctx); err != nil || !slices.Equal(ids(live), []string{"c", "b"}) {
		t.Fatalf("LiveInstances = %v, %v; want c, then b (registered again since)", ids(live), err)
	}
	if err := reg.RemoveInstance(ctx, "missing"); err != nil {
		t.Fatalf("removing a missing record: %v", err)
	}
}
